"""The string formats api/openapi.yaml names beyond JSON Schema's own, for
the contract stage's validators (openapi-core) and its generator
(schemathesis, through tests/contract/st_hooks.py).

idemd-subject: 1..128 bytes of UTF-8 without NUL (the Subject schema;
JSON Schema's maxLength counts characters)."""

SUBJECT_MAX_BYTES = 128


def is_subject(value):
    if not isinstance(value, str):
        return True  # a format applies to strings only
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate is no UTF-8
        return False
    return 1 <= n <= SUBJECT_MAX_BYTES and "\x00" not in value


OPENAPI_FORMATS = {"idemd-subject": is_subject}
