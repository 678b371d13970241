"""Names: the mandatory objects' names, and the name rules with Kubernetes' exact messages.

The name rules are DNS-1123 subdomains (object names) and labels (namespaces), and HTTP tokens
(header names). :data:`EXEMPT` and :data:`CATCH_ALL` are the one definition of the mandatory
objects' names, for the loader, the built-in configurations and the engine alike.
"""

from __future__ import annotations

import re

#: The name of the mandatory ``exempt`` priority level and flow schema.
EXEMPT = "exempt"
#: The name of the mandatory ``catch-all`` priority level and flow schema.
CATCH_ALL = "catch-all"

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_LABEL_RE = re.compile(_LABEL_FMT)
_SUBDOMAIN_RE = re.compile(_SUBDOMAIN_FMT)

_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)

# RFC 9110 token characters (the syntax of an HTTP field name).
_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    # Reproduces apimachinery's RegexError, including the double space it leaves between
    # examples ("'my-name',  or '123-abc'").
    text = message + " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            text += " or "
        text += "'" + example + "', "
    return text + "regex used for validation is '" + fmt + "')"


def _max_length_error(length: int) -> str:
    return f"must be no more than {length} characters"


def dns1123_label_errors(value: str) -> list[str]:
    """Return Kubernetes' messages for ``value`` as a DNS-1123 label (empty if valid)."""
    errors: list[str] = []
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        errors.append(_max_length_error(DNS1123_LABEL_MAX_LENGTH))
    if not _LABEL_RE.fullmatch(value):
        errors.append(_regex_error(_LABEL_MESSAGE, _LABEL_FMT, "my-name", "123-abc"))
    return errors


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Return Kubernetes' messages for ``value`` as a DNS-1123 subdomain (empty if valid)."""
    errors: list[str] = []
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(_max_length_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _SUBDOMAIN_RE.fullmatch(value):
        errors.append(_regex_error(_SUBDOMAIN_MESSAGE, _SUBDOMAIN_FMT, "example.com"))
    return errors


def is_dns1123_subdomain(value: str) -> bool:
    """Whether ``value`` is a valid DNS-1123 subdomain (a valid object name)."""
    return not dns1123_subdomain_errors(value)


def http_token_errors(value: str) -> list[str]:
    """Return the problems of ``value`` as an HTTP header name (empty if valid)."""
    if _TOKEN_RE.fullmatch(value):
        return []
    return ["must be a valid HTTP header name (an RFC 9110 token)"]
