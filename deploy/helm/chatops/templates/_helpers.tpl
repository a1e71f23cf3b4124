{{/* Chart name, or nameOverride. */}}
{{- define "chatops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-derived prefix of every resource name (at most 50 characters: suffixes follow). */}}
{{- define "chatops.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "chatops.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels selecting one component's pods. Call with (dict "root" $ "component" "worker"). */}}
{{- define "chatops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "chatops.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every label of one component's resources. Same argument as chatops.selectorLabels. */}}
{{- define "chatops.labels" -}}
helm.sh/chart: {{ include "chatops.chart" .root }}
{{ include "chatops.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: chatops
{{- end }}

{{- define "chatops.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "chatops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "chatops.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Fail the render, with a message, on values that cannot work. */}}
{{- define "chatops.checkValues" -}}
{{- if not .Values.secrets.existingSecret }}
{{- fail "secrets.existingSecret is required: the name of an existing Secret holding the tokens (see deploy/README.md)" }}
{{- end }}
{{- if and (not .Values.redis.url) (not .Values.redis.urlFromSecret) }}
{{- fail "redis.url is required (or set redis.urlFromSecret=true with REDIS_URL in the Secret): without it each pod would start its own embedded Redis" }}
{{- end }}
{{- if and .Values.redis.url .Values.redis.urlFromSecret }}
{{- fail "set either redis.url or redis.urlFromSecret, not both" }}
{{- end }}
{{- if le (int .Values.worker.terminationGracePeriodSeconds) (add (int .Values.worker.preStopSleepSeconds) (int .Values.worker.drainGraceSeconds)) }}
{{- fail "worker.terminationGracePeriodSeconds must be longer than worker.preStopSleepSeconds plus worker.drainGraceSeconds: the drain happens after the preStop pause, and must end before SIGKILL" }}
{{- end }}
{{- end }}

{{/* The environment of every chatops container: the Secret, then the ConfigMap (it wins). */}}
{{- define "chatops.envFrom" -}}
envFrom:
  - secretRef:
      name: {{ .Values.secrets.existingSecret }}
  - configMapRef:
      name: {{ include "chatops.fullname" . }}
{{- end }}

{{/* Pod annotations shared by every component: roll the pods when the ConfigMap changes. */}}
{{- define "chatops.podAnnotations" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end }}

{{/* Pod-level fields shared by every component. */}}
{{- define "chatops.podSpec" -}}
serviceAccountName: {{ include "chatops.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: tmp
    emptyDir: {}
{{- end }}

{{/* Container fields shared by every chatops container. */}}
{{- define "chatops.containerCommon" -}}
image: {{ include "chatops.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{ include "chatops.envFrom" . }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end }}
