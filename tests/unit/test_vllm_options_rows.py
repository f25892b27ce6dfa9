"""Each row of the packaged vLLM option table must be [canonical long name, arity]: a longer row, a name without its
dashes or an unknown arity makes the table malformed, named with the arities it may have."""

from __future__ import annotations

import pytest

from kvbake.errors import IntegrityError
from kvbake.serve.core.vllm_options import ARITIES, table_from_document


@pytest.mark.parametrize(("row", "named"), [
    (["--a", "flag", "extra"], "--a is not [canonical long name, arity]"),
    (["a", "flag"], "--a is not [canonical long name, arity]"),
    ([7, "flag"], "--a is not [canonical long name, arity]"),
    (["--a", "sometimes"], f"--a has arity 'sometimes', not one of {', '.join(ARITIES)}"),
])
def test_a_row_that_is_not_a_canonical_name_and_an_arity_is_refused(row, named):
    with pytest.raises(IntegrityError) as failure:
        table_from_document({"format": 1, "options": {"--a": row}, "recordings": []})
    assert named in failure.value.message and failure.value.fix.startswith("reinstall kvbake")
