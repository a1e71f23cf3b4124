"""The redaction rules, in the order they run (RE2 syntax; see `_engine`).

Contract: `RULES` is a tuple of `Rule`s; `redact` applies each in turn. Multi-line and
structural rules come first, so no single-line rule sees half a key block; rules for named
fields keep the name and replace the value; token rules replace the token. Token shapes are
the issuers' documented formats as gitleaks (`config/gitleaks.toml`) and detect-secrets
(`detect_secrets/plugins/`) encode them, loosened where they pin a length that issuers have
changed before (so a longer token of the same family is still caught).
"""

from __future__ import annotations

from agent_core._redaction._engine import Rule, rule
from agent_core._redaction._names import NAME, VALUE
from agent_core._redaction._rewrites import cookie_values, json_object_values, yaml_block_values

__all__ = ["RULES"]

_K8S_SECRET = (
    r"""\bkind["']?[ \t]*:[ \t]*["']?Secret\b"""
    r"""|\btype["']?[ \t]*:[ \t]*["']?(?:Opaque|kubernetes\.io/)"""
)
"""A Kubernetes Secret is in the text: its `data`/`stringData` values are all secrets."""

_STRUCTURAL: tuple[Rule, ...] = (
    rule(
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?P<value>[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\z))",
    ),
    rule(
        "private_key",
        r"\bPuTTY-User-Key-File-\d: [\s\S]*?Private-Lines: \d+"
        r"(?P<value>[^\n]*\n(?:[A-Za-z0-9+/=]+\n?)*)",
    ),
    rule(
        "kubernetes_secret",
        r"(?m)(?P<value>^[ \t]*(?:data|stringData):[ \t]*\r?\n(?:[ \t]+[^\n]*(?:\n|\z))+)",
        rewrite=yaml_block_values,
        gate=_K8S_SECRET,
    ),
    rule(
        "kubernetes_secret",
        r'"(?:data|stringData)"[ \t]*:[ \t]*\{(?P<value>[^{}]*)\}',
        rewrite=json_object_values,
        gate=_K8S_SECRET,
    ),
    rule(
        "kubernetes_env",
        rf"""-[ \t]*name:[ \t]*["']?{NAME}["']?[ \t]*\r?\n[ \t]*value:[ \t]*(?P<value>{VALUE})""",
    ),
    rule(
        "kubernetes_env",
        rf'"name"[ \t]*:[ \t]*"{NAME}"[ \t]*,[ \t\r\n]*"value"[ \t]*:[ \t]*(?P<value>"[^"\n]+")',
    ),
    rule(
        "azure_storage_key",
        r'"keyName"[ \t]*:[ \t]*"[^"\n]*"[^{}\n]*?"value"[ \t]*:[ \t]*"(?P<value>[^"\n]+)"',
    ),
    rule("docker_auth", r'"(?:auth|identitytoken|registrytoken)"[ \t]*:[ \t]*"(?P<value>[^"\n]+)"'),
    rule(
        "docker_auth",
        r"""\.dockerc(?:onfig|fg)(?:json)?["']?[ \t]*:[ \t]*["']?(?P<value>[A-Za-z0-9+/=]{16,})""",
    ),
)

_HEADERS: tuple[Rule, ...] = (
    rule(
        "authorization",
        r"""(?i)\b(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?"""
        r"(?:(?:bearer|basic|token|digest|negotiate|ntlm|ssws|apikey|key|aws4-hmac-sha256)[ \t]+)?"
        r"""(?P<value>[^\s"',;]+)""",
    ),
    rule("authorization", r"\b[Bb]earer[ \t]+(?P<value>[A-Za-z0-9._~+/=-]{16,})"),
    rule("authorization", r"\bSignature=(?P<value>[0-9a-f]{64})"),
    rule(
        "cookie", r"(?im)\b(?:set-)?cookie[ \t]*:[ \t]*(?P<value>[^\r\n]+)", rewrite=cookie_values
    ),
    rule("basic_auth", r"(?:^|[ \t])(?:-u|--user)[ \t=]+[^\s:]+:(?P<value>[^\s\"']+)"),
    rule(
        "credential",
        r"(?m)\bmachine[ \t]+\S+[ \t]+login[ \t]+\S+[ \t]+password[ \t]+(?P<value>\S+)",
    ),
    rule("credential", r"\bmysql(?:dump|admin)?[ \t][^\n]*?[ \t]-p(?P<value>[^\s-][^\s]*)"),
    rule("credential", r"\bredis-cli[ \t][^\n]*?[ \t]-a[ \t]+(?P<value>\S+)"),
    rule("credential", r'"AUTH"[ \t]+"(?P<value>[^"\n]+)"'),
    rule(
        "password_hash",
        r"\$(?:1|2[abxy]?|5|6|apr1|y|gy|argon2id?)\$(?P<value>[^\s:$]+\$[^\s:]{8,})",
    ),
)

_URLS: tuple[Rule, ...] = (
    rule("url_credentials", r"\b[a-z][a-z0-9+.-]*://[^\s/@:]*:(?P<value>[^\s/]+)@"),
    rule("url_credentials", r"\bhttps?://(?P<value>[0-9a-f]{32})(?::[0-9a-f]{32})?@"),
    rule("url_credentials", r"\b[\w.-]+:(?P<value>[^\s@/:]+)@(?:tcp|udp|unix)\("),
    rule(
        "slack_webhook",
        r"\bhooks\.slack\.com/(?:services|workflows|triggers)/(?P<value>[A-Za-z0-9_/+-]{16,})",
    ),
    rule(
        "feishu_webhook",
        r"\bopen\.(?:feishu\.cn|larksuite\.com|larkoffice\.com)/open-apis/bot/v2/hook/(?P<value>[0-9A-Za-z-]{16,})",
    ),
    rule("teams_webhook", r"\.webhook\.office\.com/webhookb2/(?P<value>[^\s\"'<>]+)"),
    rule("discord_webhook", r"\bdiscord(?:app)?\.com/api/webhooks/(?P<value>\d+/[\w-]{20,})"),
    rule("azure_sas", r"[?&]sig=(?P<value>[A-Za-z0-9%+/=]{16,})"),
    rule(
        "aws_signature",
        r"(?i)[?&]x-amz-(?:signature|security-token|credential)=(?P<value>[^&\s\"']+)",
    ),
)

_TOKENS: tuple[Rule, ...] = (
    # Chat platforms.
    rule("slack_token", r"\bxox[abposer]-[A-Za-z0-9-]{10,}"),
    rule("slack_token", r"\bxapp-\d+-[A-Za-z0-9-]{10,}"),
    rule("feishu_token", r"\b[tu]-g[0-9A-Za-z_]{20,}"),
    rule("discord_token", r"\b[MN][A-Za-z\d]{23,27}\.[\w-]{6}\.[\w-]{27,}"),
    rule("telegram_token", r"(?P<value>\d{5,16}:A[0-9A-Za-z_-]{34})\b"),  # also in `/bot<token>/`
    # Cloud.
    rule("aws_access_key", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    rule("gcp_api_key", r"\bAIza[\w-]{35}"),
    rule("gcp_token", r"\bya29\.[\w-]{20,}"),
    rule("gcp_client_secret", r"\bGOCSPX-[\w-]{20,}"),
    rule("azure_client_secret", r"\b[a-zA-Z0-9_~.]{3}\dQ~[a-zA-Z0-9_~.-]{31,34}"),
    rule("alibaba_access_key", r"\bLTAI[A-Za-z0-9]{12,20}\b"),
    rule("tencent_secret_id", r"\bAKID[A-Za-z0-9]{32}\b"),
    rule("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}"),
    # Version control and package registries.
    rule("github_token", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
    rule("github_token", r"\bgithub_pat_\w{22,}"),
    rule("gitlab_token", r"\bgl(?:pat|dt|rt|ptt|cbt|ft|imt|agent|oas|soat|ffct)-[\w-]{20,}"),
    rule("gitlab_token", r"\bGR1348941[\w-]{20,}"),
    rule("atlassian_token", r"\bAT(?:ATT|BB)[A-Za-z0-9_=.-]{24,}"),
    rule("npm_token", r"\bnpm_[A-Za-z0-9]{36}"),
    rule("pypi_token", r"\bpypi-AgE[\w-]{50,}"),
    # LLM providers.
    rule("anthropic_key", r"\bsk-ant-[a-z]+\d*-[\w-]{20,}"),
    rule("openai_key", r"\bsk-(?:proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}"),
    rule("groq_key", r"\bgsk_[A-Za-z0-9]{40,}"),
    rule("huggingface_token", r"\b(?:hf_|api_org_)[A-Za-z0-9]{30,}"),
    rule("perplexity_key", r"\bpplx-[A-Za-z0-9]{40,}"),
    rule("xai_key", r"\bxai-[A-Za-z0-9]{40,}"),
    rule("replicate_token", r"\br8_[A-Za-z0-9]{37}"),
    # Payment.
    rule("stripe_key", r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,}"),
    rule("stripe_key", r"\bwhsec_[A-Za-z0-9]{24,}"),
    rule("square_token", r"\b(?:EAAA|sq0atp-|sq0csp-)[\w-]{22,}"),
    rule("braintree_token", r"\baccess_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}"),
    # Messaging, observability and operations services.
    rule("sendgrid_key", r"\bSG\.[\w-]{16,32}\.[\w-]{30,64}"),
    rule("twilio_key", r"\bSK[0-9a-fA-F]{32}\b"),
    rule("mailgun_key", r"\bkey-[0-9a-f]{32}\b"),
    rule("grafana_token", r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    rule("grafana_token", r"\bglc_[A-Za-z0-9+/]{32,}={0,2}"),
    rule("grafana_token", r"\beyJrIjoi[A-Za-z0-9]{40,}={0,2}"),
    rule("sentry_token", r"\bsntry[su]_[A-Za-z0-9+/=_]{40,}"),
    rule("vault_token", r"\bhv[sbr]\.[\w-]{24,}"),
    rule("newrelic_key", r"\bNRAK-[A-Z0-9]{27}"),
    rule("dynatrace_token", r"\bdt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    rule("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?"),
    rule("doppler_token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}"),
    rule("linear_key", r"\blin_api_[A-Za-z0-9]{40}"),
    rule("notion_token", r"\b(?:ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43})"),
    rule("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    rule("postman_key", r"\bPMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"),
    rule("pulumi_token", r"\bpul-[a-f0-9]{40}"),
    rule("terraform_token", r"\b[A-Za-z0-9]{14}\.atlasv1\.[\w=-]{60,}"),
    rule("age_key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}"),
    rule("onepassword_token", r"\bops_eyJ[A-Za-z0-9+/]{100,}={0,3}"),
    rule("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
)

_FIELDS: tuple[Rule, ...] = (
    rule("kubeconfig", r"\bclient-key-data[ \t]*:[ \t]*(?P<value>\S+)"),
    rule(
        "aws_secret_key",
        rf"""(?i)\baws_?secret_?access_?key(?:\\?["'])?[ \t]*[:=][ \t]*(?P<value>{VALUE})""",
    ),
    rule("credential", rf"""{NAME}(?:\\?["'])?[ \t]*(?::=|[:=])[ \t]*(?P<value>{VALUE})"""),
    rule("credential", rf"(?:^|[ \t])--{NAME}[ \t]+(?P<value>[^\s-]\S*)"),
)

RULES: tuple[Rule, ...] = (*_STRUCTURAL, *_HEADERS, *_URLS, *_TOKENS, *_FIELDS)
"""Every rule, in the order `redact` applies them."""
