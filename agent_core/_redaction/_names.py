"""The names a secret is written under (`DB_PASSWORD=`, `"clientSecret":`, `X-Api-Key:`).

Contract: `NAME` matches a field name that ends in a secret word, written in any of the cases
configuration uses (`db_password`, `MYSQL_ROOT_PASSWORD`, `x-api-key`, `dbPassword`,
`SecretAccessKey`, `Pwd`), and nothing that only contains one: `prompt_tokens`, `secretName`,
`OLDPWD`/`PWD` (the shell's working directories) and `password reset` are not names of secrets.
A prefix joins the secret word with `_`, `-` or `.` (`REDIS_AUTH_TOKEN`) or, in camelCase, by
the word's capital (`basicAuthPassword`); a lowercase or UPPERCASE word needs the former.

The words are the union of the keyword families of detect-secrets (`plugins/keyword.py`
DENYLIST) and gitleaks (`generic-api-key` and the per-vendor `*-secret`/`*-token` rules), plus
the field names of the credential documents SRE output shows: AWS credential JSON
(`SecretAccessKey`, `SessionToken`), Azure connection strings (`AccountKey`,
`SharedAccessKey`), Feishu/Lark (`app_secret`, `tenant_access_token`, `encrypt_key`).
"""

from __future__ import annotations

__all__ = ["NAME", "VALUE"]

_WORDS: tuple[tuple[str, ...], ...] = (
    ("password",),
    ("pgpassword",),
    ("passwd",),
    ("passphrase",),
    ("secret",),
    ("token",),
    ("api", "key"),
    ("apikey",),
    ("access", "key"),
    ("private", "key"),
    ("private", "key", "id"),
    ("secret", "key"),
    ("client", "key"),
    ("auth", "key"),
    ("app", "key"),
    ("application", "key"),
    ("account", "key"),
    ("master", "key"),
    ("signing", "key"),
    ("encrypt", "key"),
    ("encryption", "key"),
    ("routing", "key"),
    ("integration", "key"),
    ("license", "key"),
    ("credential",),
    ("credentials",),
)
"""Secret words, each as its parts (joined by `_`, `-`, `.` or nothing)."""

_PREFIXED_ONLY: tuple[tuple[str, ...], ...] = (("pwd",), ("pass",))
"""Words that are a secret's name only after a prefix (`MYSQL_PWD`, `db_pass`), as `PWD` alone
is the working directory and `pass` alone a test result; `Pwd` (ODBC) stands alone too."""

_SEP = "[_.-]?"


def _forms(parts: tuple[str, ...]) -> tuple[str, str, str]:
    """The word in lower, UPPER and Capitalized (camel or Pascal) case."""
    lower = _SEP.join(parts)
    upper = _SEP.join(p.upper() for p in parts)
    capital = "".join(p.capitalize() for p in parts)
    return lower, upper, capital


def _name() -> str:
    lower_upper = [form for w in _WORDS for form in _forms(w)[:2]]
    capital = [_forms(w)[2] for w in (*_WORDS, *_PREFIXED_ONLY)]
    prefixed = [form for w in _PREFIXED_ONLY for form in _forms(w)[:2]]
    separated = r"[A-Za-z0-9_.-]*[_.-]"
    camel = r"[A-Za-z0-9_]*[a-z0-9]"
    return (
        rf"\b(?:(?:{separated})?(?:{'|'.join(lower_upper)})"
        rf"|{separated}(?:{'|'.join(prefixed)})"
        rf"|(?:{camel}|{separated})?(?:{'|'.join(capital)}))"
    )


NAME = _name()
"""A field name ending in a secret word (no groups)."""

VALUE = (
    r"""(?:"[^"\n\x00]+"|'[^'\n\x00]+'"""
    r"""|\\"[^"\n\x00]+\\"|[^\s"'`,;&}\\=\x00][^\s"'`,;&}\\\x00]*)"""
)
"""A field's value: double- or single-quoted, quoted inside a JSON string, or bare up to a
space, NUL, quote, `,`, `;`, `&` or `}`, and not starting with `=` (`x == y`) (no groups)."""
