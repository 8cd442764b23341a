"""schemathesis hooks of the contract stage (SCHEMATHESIS_HOOKS): the
string formats api/openapi.yaml names beyond JSON Schema's own, so that
generated data follows them (tests/contract/formats.py)."""

import schemathesis
from hypothesis import strategies as st

from formats import SUBJECT_MAX_BYTES, is_subject

schemathesis.openapi.format(
    "idemd-subject",
    st.text(min_size=1, max_size=SUBJECT_MAX_BYTES).filter(is_subject))
