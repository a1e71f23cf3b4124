"""Loading shell profiles (X7, X8): the never-admit list holds against an operator's file.

Why this way: the never-admit list is only a brake if no profile can loosen it, so each row is
an operator file that tries (a listed flag, a prefix pattern, an abbreviation getopt would
expand, a program that runs programs) or is malformed, loaded the way the worker loads it
(`ShellProfiles.load` on a real file); the error must name the profile. The shipped profiles
pass the same check, and the worker refuses to start on a bad file (`open_worker`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agent_core._errors import ConfigError
from agent_core.tools._shell import ShellProfiles
from agent_core.tools._shell_never_admit import NEVER_ADMIT, check_flag
from bot.errors import BotConfigError
from bot.settings import Settings
from bot.worker.assembly import open_worker

BAD_FILES = [
    ("kubectl-server", '[programs.kubectl.subcommands.get]\nflags = { "--server" = "name" }',
     "shell profile `kubectl get`", "`--server` chooses another server"),
    ("kubectl-s", '[programs.kubectl.flags]\n"-s" = "name"', "shell profile `kubectl`",
     "`-s` chooses another server"),
    ("kubectl-aliased", '[programs.kubectl.flags]\n"-n|--as" = "name"', "`kubectl`",
     "`--as` chooses another identity"),
    ("kubectl-as-group", '[programs.kubectl.flags]\n"--as-group" = "name"', "`kubectl`",
     "`--as-group` chooses another identity"),
    ("client-prefix", '[programs.kubectl.flags]\n"--client-anything" = "name"', "`kubectl`",
     "passes a credential"),
    ("kubeconfig-abbreviated", '[programs.kubectl.flags]\n"--kubeconf" = "path"', "`kubectl`",
     "`--kubeconf` abbreviates `--kubeconfig`"),
    ("context", '[programs.kubectl.flags]\n"--context" = "name"', "`kubectl`", "configuration"),
    ("systemctl-host", '[programs.systemctl.subcommands.status]\nflags = { "-H" = "name" }',
     "shell profile `systemctl status`", "`-H` operates on another host"),
    ("journal-vacuum-abbrev", '[programs.journalctl]\nflags = { "--vacuum-ti" = "duration" }',
     "`journalctl`", "`--vacuum-ti` writes or deletes files"),
    ("git-c", '[programs.git.subcommands.log]\nflags = { "-c" = "text" }', "`git log`",
     "`-c` sets configuration"),
    ("git-output-abbrev", '[programs.git.subcommands.log]\nflags = { "--out" = "path" }',
     "`git log`", "`--out` abbreviates `--output`"),
    ("tar-to-command", '[programs.tar]\nflags = { "--to-command" = "text" }', "`tar`",
     "`--to-command` runs another program"),
    ("tar-output", '[programs.tar]\nflags = { "-o" = "none" }', "`tar`", "`-o` writes"),
    ("pager", '[programs.mytool]\nflags = { "--pager" = "text" }', "`mytool`", "starts a pager"),
    ("sed", '[programs.sed]\npositionals = ["text", "path+"]', "shell profile `sed`",
     "runs another program or a script"),
    ("env", "[programs.env]", "shell profile `env`", "runs another program"),
    ("path-program", '[programs."/bin/cat"]', "'/bin/cat'", "a bare name"),
    ("unknown-shape", '[programs.cat]\npositionals = ["anything"]', "`cat`", "unknown shape"),
    ("unknown-key", '[programs.cat]\nflagz = {}', "`cat`", "unknown keys ['flagz']"),
    ("single-dash-long", '[programs.mytool]\nflags = { "-name" = "text" }', "`mytool`",
     "is not spelled `-x` or `--long-name`"),
    ("spelling-with-value", '[programs.mytool]\nflags = { "--x=1" = "none" }', "`mytool`",
     "is not spelled"),
    ("optional-short", '[programs.mytool]\nflags = { "-x" = { shape = "int", optional = true } }',
     "`mytool`", "only long flags take optional values"),
    ("repeat-not-last", '[programs.mytool]\npositionals = ["path*", "name"]', "`mytool`",
     "only the last operand repeats"),
    ("required-after-optional", '[programs.mytool]\npositionals = ["name?", "name"]',
     "`mytool`", "none is required after an optional one"),
    ("enum-without-choices", '[programs.mytool]\nflags = { "-x" = "enum" }', "`mytool`",
     "`choices`"),
    ("not-toml", "[programs.cat\n", "shell profiles", "not TOML"),
    ("stray-table", "[cat]", "shell profiles", "the one top-level table is `programs`"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [pytest.param(text, where, why, id=name) for name, text, where, why in BAD_FILES],
)
def test_x8_bad_operator_profiles_are_config_errors_naming_the_profile(
    tmp_path: Path, text: str, where: str, why: str
) -> None:
    """X8: no operator profile admits a never-admitted flag; each fault names its profile."""
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        ShellProfiles.load(str(path))
    assert where in str(caught.value) and why in str(caught.value)


def test_x8_every_listed_flag_is_refused_at_load() -> None:
    """X8: each never-admit entry (and an abbreviation of each long one) fails `check_flag`."""
    checked = 0
    for program, flags in NEVER_ADMIT.items():
        owner = "anytool" if program == "*" else program
        for flag in flags:
            spelled = flag.replace("*", "x")
            assert check_flag(owner, spelled), (owner, spelled)
            if flag.startswith("--") and len(flag) > 5 and "*" not in flag:
                assert check_flag(owner, flag[:-1]), (owner, flag[:-1])
            checked += 1
    assert checked >= 100


def test_x7_the_shipped_profiles_load_and_cover_the_issue_list() -> None:
    """X7: the shipped programs are the ones SRE teams use, with the named subcommands."""
    programs = ShellProfiles.shipped().programs
    assert set(programs) >= {
        "kubectl", "journalctl", "systemctl", "git", "cat", "head", "tail", "grep", "ls", "df",
        "du", "free", "uptime", "ps", "ss", "dig",
    }  # fmt: skip
    assert set(programs["kubectl"].subcommands) >= {"get", "describe", "logs", "top", "events"}
    assert set(programs["kubectl"].subcommands["top"].subcommands) >= {"pod", "node"}
    assert set(programs["git"].subcommands) == {"log", "show", "diff"}
    assert "status" in programs["systemctl"].subcommands


def test_x7_an_operator_profile_adds_a_program_and_replaces_a_shipped_one(tmp_path: Path) -> None:
    """X7: operators' programs are added; an operator's `cat` replaces the shipped one."""
    path = tmp_path / "profiles.toml"
    path.write_text('[programs.mytool]\npositionals = ["name"]\n[programs.cat]\n')
    programs = ShellProfiles.load(str(path)).programs
    assert programs["mytool"].positionals[0].value.shape == "name"
    assert programs["cat"].flags == {} and programs["cat"].positionals == ()
    assert "kubectl" in programs


def test_x7_an_unreadable_or_huge_file_is_a_config_error(tmp_path: Path) -> None:
    """X7: a missing or oversized file stops start-up with its path in the message."""
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path}/missing.toml")):
        ShellProfiles.load(str(tmp_path / "missing.toml"))
    huge = tmp_path / "huge.toml"
    huge.write_text("# " + "x" * 1_048_576)
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        ShellProfiles.load(str(huge))


async def test_x8_a_worker_does_not_start_on_a_profile_admitting_a_never_admitted_flag(
    bot_settings: Settings, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """X8: `CHATOPS_SHELL_PROFILES_FILE` with `--server` stops the worker, naming the profile."""
    path = tmp_path / "profiles.toml"
    path.write_text('[programs.kubectl.subcommands.get]\nflags = { "--server" = "name" }\n')
    settings = bot_settings.model_copy(
        update={"shell_allowlist": "kubectl get", "shell_profiles_file": str(path)}
    )
    with pytest.raises(BotConfigError) as caught:
        async with open_worker(settings, redis=redis_client):
            pass
    message = str(caught.value)
    assert message.startswith("CHATOPS_SHELL_PROFILES_FILE: shell profile `kubectl get`")
    assert "`--server` chooses another server" in message
