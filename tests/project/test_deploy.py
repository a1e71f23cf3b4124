"""The deployment files in `deploy/` agree with the code they deploy.

There is no Docker engine and no Kubernetes cluster where these tests run, so nothing is built or
started. Instead each file is checked against the things it must agree with, taken from the code
itself rather than copied into the test:

- every command line in the Dockerfile, compose file and rendered chart is parsed by the real
  `chatops` CLI (`bot.cli.main.app`, through click), so a renamed option or subcommand fails here;
- every environment variable they set is a `validation_alias` of `bot.settings.Settings`, so a
  typo (which pydantic-settings would silently ignore) fails here;
- the Dockerfile is read line by line (it is small and its grammar simple); docker-compose.yml
  with PyYAML, merge keys included, as compose reads it, and is validated against the Compose
  Specification's JSON schema that `check-jsonschema` ships;
- the Helm chart is rendered by Helm itself: `helm-python-sdk` binds Helm's Go SDK (v4), so the
  templates go through the real Go template engine, Sprig and `fail`, with no `helm` binary
  (none is packaged for this machine kind: not in Debian, not on PyPI for Linux). Each rendered
  object is then validated against the Kubernetes OpenAPI schema in strict mode (unknown fields
  fail) by `kubernetes-validate`, which ships the schemas. All three are dev dependencies: when
  one is missing its tests fail and say what to install; they never skip.
- Go templates quietly render a missing value as empty, so every `.Values.x.y` the templates read
  is also looked up in values.yaml, and every value there must be read by some template.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer.main
import yaml
from pydantic import AliasChoices, SecretStr

from bot.cli.main import app as cli_app
from bot.settings import Settings
from tests.paths import ROOT

DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
COMPOSE = DEPLOY / "docker-compose.yml"
CHART = DEPLOY / "helm" / "chatops"
ADAPTERS = ROOT / "bot" / "adapters"
SLACK_ADAPTER = ADAPTERS / "slack"
SLACK_CALL = re.compile(
    r"\b(chat_postMessage|chat_update|assistant_threads_\w+|users_\w+|conversations_\w+)\("
)

# The process commands of the external contract (docs/design.md §External contract) that a
# deployment runs.
CONTRACT_SUBCOMMANDS = {"serve", "worker", "scheduler"}
CHATOPS_SERVICES = ("ingress", "worker", "scheduler")
UNPRIVILEGED_UID = 10001
# Workers drain on SIGTERM; they need time for a must-complete tool and a model response.
MIN_WORKER_GRACE_S = 60
# Required values for any render (the chart refuses to render without them).
REQUIRED_VALUES: dict[str, Any] = {
    "secrets": {"existingSecret": "chatops-secrets"},
    "redis": {"url": "redis://redis.chatops.svc:6379/0"},
}
RELEASE = "chatops"
# Kubernetes versions the rendered objects must be valid for: the chart's floor and the newest
# kubernetes-validate knows.
KUBE_VERSIONS = ("1.25", "latest")
# Names in deploy/ docs that look like chatops settings but are compose's own variables.
NOT_SETTINGS = {"CHATOPS_IMAGE"}
SETTING_NAME = re.compile(r"\b(?:REDIS|OPENAI|CHATOPS|SLACK|FEISHU)_[A-Z0-9_]+\b")


# ---- the code's side of the contract -------------------------------------------------------


def env_aliases(alias: object) -> set[str]:
    """The environment variable names of a field's `validation_alias` (upper-case ones)."""
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return {c for c in choices if isinstance(c, str) and c.isupper()}


def settings_env_names() -> set[str]:
    """Every environment variable `Settings` reads."""
    return {n for f in Settings.model_fields.values() for n in env_aliases(f.validation_alias)}


def secret_env_names() -> set[str]:
    """The variables `Settings` holds as `SecretStr`: these must come from a Secret only."""
    return {
        name
        for field in Settings.model_fields.values()
        if field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation)
        for name in env_aliases(field.validation_alias)
    }


def parse_cli(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse `chatops ARGV` with the real CLI, without running it; (subcommand, its params)."""
    assert argv, "an empty command line"
    assert all(isinstance(arg, str) for arg in argv), f"not all strings: {argv}"
    name, *rest = argv
    assert name in CONTRACT_SUBCOMMANDS, f"{name!r} is not a process command of the contract"
    # Typer's click group (recent typer releases vendor click, so no click types are named).
    commands: dict[str, Any] = getattr(typer.main.get_command(cli_app), "commands", {})
    command = commands.get(name)
    assert command is not None, f"the CLI has no {name!r} subcommand"
    try:
        context = command.make_context(name, list(rest))
    except Exception as exc:  # click's UsageError and BadParameter
        reason = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        pytest.fail(f"`chatops {shlex.join(argv)}` does not parse: {reason}", pytrace=False)
    return name, dict(context.params)


def test_settings_helpers_see_the_contract():
    names = settings_env_names()
    assert {"REDIS_URL", "OPENAI_API_KEY", "CHATOPS_LEASE_TTL_S", "CHATOPS_HTTP_ALLOWLIST"} <= names
    assert {"OPENAI_API_KEY", "SLACK_BOT_TOKEN", "FEISHU_APP_SECRET"} <= secret_env_names()
    assert "REDIS_URL" not in secret_env_names()


# ---- Dockerfile ------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, each list starting with its FROM."""
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in dockerfile_instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            stages.append([])
        assert stages or keyword in {"ARG"}, f"{keyword} before the first FROM"
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def env_names(arguments: str) -> list[str]:
    """Variable names of an ENV or ARG instruction (`A=1 B=2` or the legacy `A 1`)."""
    words = shlex.split(arguments)
    if words and "=" not in words[0]:
        return [words[0]]
    return [word.partition("=")[0] for word in words]


def exec_form(arguments: str) -> list[str]:
    """The JSON (exec) form of ENTRYPOINT/CMD; the shell form would break signal handling."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


def test_dockerfile_is_multi_stage_and_copies_the_venv_from_the_builder():
    stages = dockerfile_stages()
    assert len(stages) >= 2
    builder_alias = stages[0][0][1].split()[-1]
    assert stages[0][0][1].lower().split()[-2:] == ["as", builder_alias.lower()]
    final = stages[-1]
    assert final[0][1].split()[0] == "python:3.11-slim"
    copies = [rest for keyword, rest in final if keyword == "COPY"]
    assert any(f"--from={builder_alias}" in rest for rest in copies), copies
    # The builder installs the project into a venv, not as an editable checkout.
    runs = " ".join(rest for keyword, rest in stages[0] if keyword == "RUN")
    assert "venv" in runs and "pip install ." in runs and "-e ." not in runs


def test_dockerfile_builder_copies_every_package_the_project_ships():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    includes = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*").rstrip(".") for pattern in includes}
    copied: set[str] = set()
    for keyword, rest in dockerfile_stages()[0]:
        if keyword == "COPY" and not rest.startswith("--from"):
            copied.update(Path(source).as_posix() for source in shlex.split(rest)[:-1])
    readme = pyproject["project"]["readme"]
    assert packages | {"pyproject.toml", readme} <= copied, sorted(copied)
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_dockerfile_final_stage_runs_chatops_as_a_fixed_unprivileged_user():
    final = dockerfile_stages()[-1]
    users = [rest for keyword, rest in final if keyword == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user, _, group = users[-1].partition(":")
    assert user not in {"root", "0", ""} and group not in {"root", "0"}
    assert user == str(UNPRIVILEGED_UID), "Kubernetes' runAsUser relies on a fixed UID"
    assert any(
        keyword == "RUN" and f"--uid {UNPRIVILEGED_UID}" in rest for keyword, rest in final
    ), "the UID should exist in /etc/passwd (a home directory, a name in logs)"

    entrypoints = [exec_form(rest) for keyword, rest in final if keyword == "ENTRYPOINT"]
    assert entrypoints and entrypoints[-1] == ["chatops"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "chatops" in pyproject["project"]["scripts"], "the entrypoint is the console script"

    cmds = [exec_form(rest) for keyword, rest in final if keyword == "CMD"]
    assert cmds, "no default CMD"
    name, params = parse_cli(cmds[-1])
    assert name == "serve" and params["host"] == "0.0.0.0"
    exposed = {rest.split("/")[0] for keyword, rest in final if keyword == "EXPOSE"}
    assert exposed == {"8080"} and params["port"] == 8080


def test_dockerfile_bakes_in_no_secret():
    suspicious = re.compile(r"TOKEN|SECRET|KEY|PASSWORD", re.IGNORECASE)
    secrets = secret_env_names()
    for keyword, rest in dockerfile_instructions(DOCKERFILE.read_text()):
        if keyword in {"ENV", "ARG"}:
            for name in env_names(rest):
                assert not suspicious.search(name), f"{keyword} {name}: secrets come at run time"
        assert not any(name in rest for name in secrets), f"{keyword} {rest} names a secret"
        if keyword in {"COPY", "ADD"}:
            assert ".env" not in shlex.split(rest)[:-1], "the .env file must not be copied"
    final = dockerfile_stages()[-1]
    final_env = [name for keyword, rest in final if keyword == "ENV" for name in env_names(rest)]
    assert "PYTHONUNBUFFERED" in final_env, "logs must not sit in a buffer when a pod dies"


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_context():
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert {".env", ".venv", ".git"} <= set(patterns)
    excluded = [p for p in patterns if not p.startswith("!")]
    for keyword, rest in dockerfile_stages()[0]:
        if keyword == "COPY" and not rest.startswith("--from"):
            for source in shlex.split(rest)[:-1]:
                hits = [p for p in excluded if fnmatch.fnmatch(source, p.removesuffix("/"))]
                assert not hits, f"COPY {source} is excluded from the context by {hits}"


# ---- docker-compose.yml ------------------------------------------------------------------------


@cache
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())  # merge keys (`<<: *chatops`) resolved
    assert isinstance(loaded, dict)
    return loaded


def compose_duration_s(value: str) -> float:
    """A compose duration such as `90s`, `1m30s` or `1m`, in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"not a duration: {value!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def command_list(service: Mapping[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def test_compose_file_matches_the_compose_specification():
    # check-jsonschema ships the Compose Specification's schema: unknown keys (a misspelt
    # `stop_grace_period`, which compose would reject at `up`) fail here.
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]
        + [str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (
        "docker-compose.yml does not validate (is check-jsonschema installed? it is a dev "
        f"dependency):\n{result.stdout}{result.stderr}"
    )


def test_compose_has_the_four_services():
    assert set(compose()["services"]) >= {"redis", *CHATOPS_SERVICES}


def test_compose_redis_keeps_its_stream_across_restarts():
    redis = compose()["services"]["redis"]
    assert str(redis["image"]).split(":")[0] == "redis"
    assert str(redis["image"]).split(":")[1].split(".")[0] == "7"
    command = " ".join(command_list(redis))
    assert "--appendonly yes" in command
    assert "--appendfsync everysec" in command
    assert any(str(volume).endswith(":/data") for volume in redis["volumes"])
    named = str(redis["volumes"][0]).split(":")[0]
    assert named in (compose().get("volumes") or {}), "the AOF must live on a named volume"
    assert command_list({"command": redis["healthcheck"]["test"]})[-2:] == ["redis-cli", "ping"]


@pytest.mark.parametrize("name", CHATOPS_SERVICES)
def test_compose_chatops_services_run_contract_commands(name):
    service = compose()["services"][name]
    subcommand, _params = parse_cli(command_list(service))
    assert subcommand == {"ingress": "serve"}.get(name, name)
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (COMPOSE.parent / service["build"]["context"]).resolve() == ROOT
    env_files = service["env_file"]
    env_files = [env_files] if isinstance(env_files, str) else env_files
    paths = [e if isinstance(e, str) else e["path"] for e in env_files]
    assert [(COMPOSE.parent / p).resolve() for p in paths] == [ROOT / ".env"]
    assert service["environment"]["REDIS_URL"] == "redis://redis:6379/0"
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    assert service["read_only"] is True and service["cap_drop"] == ["ALL"]


def test_compose_ingress_serves_on_its_published_port_and_checks_healthz():
    ingress = compose()["services"]["ingress"]
    _, params = parse_cli(command_list(ingress))
    assert params["host"] == "0.0.0.0"
    assert [str(p) for p in ingress["ports"]] == [f"{params['port']}:{params['port']}"]
    check = " ".join(command_list({"command": ingress["healthcheck"]["test"]}))
    assert f"127.0.0.1:{params['port']}/healthz" in check


def test_compose_workers_are_several_and_get_time_to_drain():
    services = compose()["services"]
    workers = [s for s in services.values() if "command" in s and command_list(s)[0] == "worker"]
    replicas = sum(int(w.get("deploy", {}).get("replicas", 1)) for w in workers)
    assert replicas >= 2
    for worker in workers:
        _, params = parse_cli(command_list(worker))
        assert MIN_WORKER_GRACE_S <= params["grace"]  # the drain's own limit (--grace)
        assert params["grace"] < compose_duration_s(worker["stop_grace_period"])


def test_compose_sets_only_known_settings():
    known = settings_env_names()
    for name, service in compose()["services"].items():
        if name == "redis":
            continue
        environment = service.get("environment") or {}
        keys = (
            [str(e).partition("=")[0] for e in environment]
            if isinstance(environment, list)
            else list(environment)
        )
        assert set(keys) <= known, f"{name}: {set(keys) - known} are not Settings fields"
    # compose's env_file is the repository's .env, made from .env.example.
    example = [
        line.partition("=")[0].strip()
        for line in (ROOT / ".env.example").read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    ]
    assert example and set(example) <= known, set(example) - known


def test_deploy_docs_name_only_known_settings():
    known = settings_env_names() | NOT_SETTINGS
    for path in [DEPLOY / "README.md", COMPOSE, *sorted(CHART.rglob("*")), DOCKERFILE]:
        if path.is_file():
            unknown = set(SETTING_NAME.findall(path.read_text())) - known
            assert not unknown, f"{path.relative_to(ROOT)} names unknown settings {unknown}"


# ---- Helm chart: structure (no renderer needed) ------------------------------------------------

TEMPLATES = (
    "_helpers.tpl",
    "configmap.yaml",
    "deployment-ingress.yaml",
    "deployment-worker.yaml",
    "deployment-scheduler.yaml",
    "service.yaml",
    "pdb.yaml",
    "hpa.yaml",
)
VALUES_REF = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


@cache
def chart_values() -> dict[str, Any]:
    loaded = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def values_references() -> dict[tuple[str, ...], set[str]]:
    """Every `.Values.a.b` path the templates read, with the files that read it."""
    found: dict[tuple[str, ...], set[str]] = {}
    for template in sorted((CHART / "templates").iterdir()):
        for match in VALUES_REF.finditer(template.read_text()):
            found.setdefault(tuple(match.group(1).split(".")[1:]), set()).add(template.name)
    return found


def leaf_paths(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from leaf_paths(value, (*prefix, key))
        else:
            yield (*prefix, key)


def test_chart_metadata_matches_the_project():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "chatops" and chart["type"] == "application"
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert chart["appVersion"] == pyproject["project"]["version"], "the default image tag"


def test_chart_has_every_template():
    for name in TEMPLATES:
        assert (CHART / "templates" / name).is_file(), name


def test_every_value_the_templates_read_exists_in_values_yaml():
    values = chart_values()
    for path, files in values_references().items():
        node: Any = values
        for depth, key in enumerate(path):
            assert isinstance(node, Mapping) and key in node, (
                f"{sorted(files)} read .Values.{'.'.join(path)}, but values.yaml has no "
                f"{'.'.join(path[: depth + 1])}: Helm would render it empty"
            )
            node = node[key]


def test_every_value_in_values_yaml_is_read_by_a_template():
    read = set(values_references())
    for path in leaf_paths(chart_values()):
        prefixes = {path[:n] for n in range(1, len(path) + 1)}
        assert prefixes & read, f"values.yaml sets {'.'.join(path)} but no template reads it"


def test_chart_templates_hold_the_operational_promises():
    text = {name: (CHART / "templates" / name).read_text() for name in TEMPLATES}
    assert "path: /readyz" in text["deployment-ingress.yaml"]
    assert "path: /healthz" in text["deployment-ingress.yaml"]
    assert "terminationGracePeriodSeconds" in text["deployment-worker.yaml"]
    assert "preStop" in text["deployment-worker.yaml"]
    assert "kind: PodDisruptionBudget" in text["pdb.yaml"]
    assert "apiVersion: autoscaling/v2" in text["hpa.yaml"]
    assert "secretRef" in text["_helpers.tpl"]
    assert chart_values()["podSecurityContext"]["runAsNonRoot"] is True
    for template in (CHART / "templates").iterdir():
        assert not re.search(r"^kind:\s*Secret\s*$", template.read_text(), re.MULTILINE), (
            f"{template.name}: the chart never renders a Secret from values"
        )


def test_values_yaml_holds_no_secret():
    secrets = secret_env_names()
    text = (CHART / "values.yaml").read_text()
    for path in leaf_paths(chart_values()):
        assert path[-1] not in secrets, f"values.yaml sets {'.'.join(path)}"
        assert not re.search(r"token|password|apikey|api_key", path[-1], re.IGNORECASE), path
    # A default existingSecret would make an install against the wrong Secret look fine.
    assert chart_values()["secrets"]["existingSecret"] == ""
    assert "sk-" not in re.sub(r"#.*", "", text)


# ---- Helm chart: rendered by Helm ---------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    try:
        import helm_python
    except ImportError:  # pragma: no cover - a broken environment
        pytest.fail(
            "helm-python-sdk is not installed: it renders the chart with Helm's own engine "
            "(`pip install -e '.[dev]'`). The Helm tests never skip.",
            pytrace=False,
        )
    return helm_python


@pytest.fixture(scope="module")
def kubernetes_validate() -> ModuleType:
    try:
        import kubernetes_validate as validator  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - a broken environment
        pytest.fail(
            "kubernetes-validate is not installed: it checks rendered objects against the "
            "Kubernetes schemas (`pip install -e '.[dev]'`). The Helm tests never skip.",
            pytrace=False,
        )
    assert isinstance(validator, ModuleType)
    return validator


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def render(helm: ModuleType, overrides: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's objects, rendered by Helm with REQUIRED_VALUES and `overrides`."""
    values = merged(REQUIRED_VALUES, overrides or {})
    with helm.Chart.load(CHART) as chart:
        manifests: dict[str, str] = chart.render(values, name=RELEASE, namespace="chatops")
    objects: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def deployment(objects: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return one(objects, "Deployment", f"{RELEASE}-{component}")


def container(deploy: Mapping[str, Any]) -> dict[str, Any]:
    containers = deploy["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_helm_lint_is_clean(helm):
    report = helm.lint(CHART, REQUIRED_VALUES, strict=True)
    assert not report["errors"], report
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems, problems


def test_chart_renders_the_expected_objects(helm):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in render(helm))
    assert kinds == [
        ("ConfigMap", RELEASE),
        ("Deployment", f"{RELEASE}-ingress"),
        ("Deployment", f"{RELEASE}-scheduler"),
        ("Deployment", f"{RELEASE}-worker"),
        ("HorizontalPodAutoscaler", f"{RELEASE}-worker"),
        ("PodDisruptionBudget", f"{RELEASE}-worker"),
        ("Service", RELEASE),
        ("ServiceAccount", RELEASE),
    ]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_rendered_objects_match_the_kubernetes_schema(helm, kubernetes_validate, kube_version):
    version = kubernetes_validate.latest_version() if kube_version == "latest" else kube_version
    for overrides in ({}, {"worker": {"hpa": {"enabled": False}}, "env": {"TZ": "UTC"}}):
        for obj in render(helm, overrides):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} on {version}: {exc}")


def test_rendered_commands_are_the_contract_commands(helm):
    objects = render(helm)
    for component, subcommand in {"ingress": "serve", "worker": "worker"}.items():
        assert parse_cli(container(deployment(objects, component))["args"])[0] == subcommand
    name, params = parse_cli(container(deployment(objects, "scheduler"))["args"])
    assert name == "scheduler" and params["interval"] == chart_values()["scheduler"]["interval"]
    _, params = parse_cli(container(deployment(objects, "worker"))["args"])
    assert params["concurrency"] == chart_values()["worker"]["concurrency"]
    extra = render(helm, {"ingress": {"extraArgs": ["--feishu-long-connection"]}})
    _, params = parse_cli(container(deployment(extra, "ingress"))["args"])
    assert params["feishu_long_connection"] is True


def test_ingress_probes_and_service(helm):
    objects = render(helm)
    ingress = deployment(objects, "ingress")
    main = container(ingress)
    _, params = parse_cli(main["args"])
    assert params["host"] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"http": params["port"]} and params["port"] == 8080
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert ingress["spec"]["replicas"] == 1

    service = one(objects, "Service", RELEASE)
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] == "Deployment"
    }
    selected = {
        name for name, labels in pods.items() if selects(service["spec"]["selector"], labels)
    }
    assert selected == {f"{RELEASE}-ingress"}, (
        "the Service must route webhooks to ingress pods only"
    )


def test_worker_drains_within_its_grace_period(helm):
    values = chart_values()["worker"]
    worker = deployment(render(helm), "worker")
    spec = worker["spec"]["template"]["spec"]
    grace = spec["terminationGracePeriodSeconds"]
    assert grace == values["terminationGracePeriodSeconds"] >= MIN_WORKER_GRACE_S
    compose_grace = compose_duration_s(compose()["services"]["worker"]["stop_grace_period"])
    assert grace == compose_grace, "compose and Helm give workers the same time to drain"
    pre_stop = container(worker)["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep" and 0 < int(pre_stop[1]) < grace
    _, params = parse_cli(container(worker)["args"])
    assert params["grace"] == values["drainGraceSeconds"] >= MIN_WORKER_GRACE_S
    assert int(pre_stop[1]) + params["grace"] < grace  # the worker leaves before SIGKILL
    # Rolling updates start the replacement before an old worker drains.
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds"):
        render(helm, {"worker": {"terminationGracePeriodSeconds": 5, "preStopSleepSeconds": 5}})
    no_pause = deployment(render(helm, {"worker": {"preStopSleepSeconds": 0}}), "worker")
    assert "lifecycle" not in container(no_pause)


def test_worker_autoscaling_and_disruption_budget(helm):
    values = chart_values()["worker"]
    objects = render(helm)
    worker = deployment(objects, "worker")
    pod_labels = worker["spec"]["template"]["metadata"]["labels"]
    assert selects(worker["spec"]["selector"]["matchLabels"], pod_labels)
    assert "replicas" not in worker["spec"], "with the HPA on, the HPA owns the replica count"

    hpa = one(objects, "HorizontalPodAutoscaler", f"{RELEASE}-worker")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": worker["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] == values["hpa"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] == values["hpa"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    target = values["hpa"]["targetCPUUtilizationPercentage"]
    assert metric["resource"]["target"] == {"type": "Utilization", "averageUtilization": target}
    assert container(worker)["resources"]["requests"]["cpu"], "a CPU HPA needs a CPU request"

    pdb = one(objects, "PodDisruptionBudget", f"{RELEASE}-worker")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == values["pdb"]["minAvailable"]
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    others = [o for o in objects if o["kind"] == "Deployment" and o is not worker]
    for other in others:
        labels = other["spec"]["template"]["metadata"]["labels"]
        assert not selects(pdb["spec"]["selector"]["matchLabels"], labels)

    fixed = render(helm, {"worker": {"hpa": {"enabled": False}, "pdb": {"enabled": False}}})
    assert deployment(fixed, "worker")["spec"]["replicas"] == values["replicas"] >= 2
    assert {o["kind"] for o in fixed}.isdisjoint({"HorizontalPodAutoscaler", "PodDisruptionBudget"})


def test_scheduler_runs_one_replica_and_may_run_two(helm):
    assert deployment(render(helm), "scheduler")["spec"]["replicas"] == 1
    two = render(helm, {"scheduler": {"replicas": 2}})
    assert deployment(two, "scheduler")["spec"]["replicas"] == 2


@pytest.mark.parametrize("component", CHATOPS_SERVICES)
def test_pods_run_unprivileged_on_a_read_only_root(helm, component):
    objects = render(helm)
    pod = deployment(objects, component)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == UNPRIVILEGED_UID
    assert pod["automountServiceAccountToken"] is False
    main = container(deployment(objects, component))
    context = main["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    assert "add" not in context["capabilities"]
    # A read-only root still needs a writable /tmp (tempfile, libraries' scratch files).
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert main["image"] == f"chatops:{chart['appVersion']}"


@pytest.mark.parametrize("component", CHATOPS_SERVICES)
def test_secrets_come_from_the_existing_secret_only(helm, component):
    objects = render(helm)
    main = container(deployment(objects, component))
    sources = main["envFrom"]
    refs = [s["secretRef"]["name"] for s in sources if "secretRef" in s]
    assert refs == [REQUIRED_VALUES["secrets"]["existingSecret"]]
    # The ConfigMap comes last: for the same name an explicit value wins over the Secret.
    assert sources[-1] == {"configMapRef": {"name": RELEASE}}
    secrets = secret_env_names()
    for entry in main.get("env", []):
        assert entry["name"] not in secrets or "value" not in entry, entry


def test_configmap_sets_only_known_non_secret_settings(helm):
    everything = {
        "config": {
            "model": "gpt-4.1",
            "openaiBaseUrl": "https://llm.internal/v1",
            "httpAllowlist": "prometheus:9090,loki",
            "leaseTtlSeconds": 45,
            "slackApiUrl": "https://slack-proxy.internal/api/",
            "feishuDomain": "https://open.larksuite.com",
            "pricePromptPerMTok": 2.5,
            "priceCompletionPerMTok": 10,
        }
    }
    data = one(render(helm, everything), "ConfigMap", RELEASE)["data"]
    known, secrets = settings_env_names(), secret_env_names()
    assert set(data) <= known, f"{set(data) - known} are not Settings fields"
    assert not set(data) & secrets, "secrets belong in the existing Secret"
    # What the ConfigMap says, Settings reads back as the values meant.
    settings = Settings.model_validate(data)
    assert settings.redis_url == REQUIRED_VALUES["redis"]["url"]
    assert settings.model == "gpt-4.1" and settings.lease_ttl_s == 45
    assert settings.openai_base_url == "https://llm.internal/v1"
    assert settings.http_allowlist == "prometheus:9090,loki"
    assert settings.slack_api_url == "https://slack-proxy.internal/api/"
    assert settings.feishu_domain == "https://open.larksuite.com"
    assert (settings.price_prompt_per_mtok, settings.price_completion_per_mtok) == (2.5, 10)

    # Empty strings are left out, so chatops' own defaults apply (an empty OPENAI_BASE_URL
    # would otherwise replace OpenAI's URL with "").
    defaults = one(render(helm), "ConfigMap", RELEASE)["data"]
    assert all(value != "" for value in defaults.values()), defaults
    assert set(defaults) <= known


def test_pods_roll_when_the_config_changes(helm):
    def checksum(objects: list[dict[str, Any]]) -> str:
        annotations = deployment(objects, "worker")["spec"]["template"]["metadata"]["annotations"]
        value: str = annotations["checksum/config"]
        return value

    assert checksum(render(helm)) != checksum(render(helm, {"config": {"model": "other"}}))


def test_redis_url_from_the_secret(helm):
    objects = render(helm, {"redis": {"url": "", "urlFromSecret": True}})
    assert "REDIS_URL" not in one(objects, "ConfigMap", RELEASE)["data"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"secrets": {"existingSecret": ""}}, "secrets.existingSecret is required"),
        ({"redis": {"url": ""}}, "redis.url is required"),
        ({"redis": {"urlFromSecret": True}}, "either redis.url or redis.urlFromSecret"),
    ],
)
def test_chart_refuses_values_that_cannot_work(helm, overrides, message):
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(helm, overrides)


def test_the_slack_manifest_grants_what_the_bot_calls_and_routes_to_the_ingress() -> None:
    manifest = yaml.safe_load((DEPLOY / "slack-app-manifest.yaml").read_text())
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"app_mentions:read", "chat:write", "channels:history", "assistant:write"} <= scopes
    assert {"groups:history", "users:read"} <= scopes  # the thread context and its names
    settings = manifest["settings"]
    assert {"app_mention", "message.channels"} <= set(settings["event_subscriptions"]["bot_events"])
    events_url = settings["event_subscriptions"]["request_url"]
    assert events_url.endswith("/slack/events")  # the ingress's one Slack route
    assert settings["interactivity"]["is_enabled"]
    assert settings["interactivity"]["request_url"] == events_url
    called = {
        m for path in SLACK_ADAPTER.glob("*.py") for m in SLACK_CALL.findall(path.read_text())
    }
    assert called == {
        "chat_postMessage",
        "chat_update",
        "assistant_threads_setStatus",
        "conversations_replies",
        "users_info",
    }
