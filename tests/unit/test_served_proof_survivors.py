"""Lock's refusal when the chain bakes other bytes than the serve runs names the differing file and the fixes."""

from __future__ import annotations

import pytest

from kvbake.bake.adapters.served_proof import require_served_proof
from kvbake.errors import IntegrityError
from tests.unit.test_served_overlay import ROOT, write_record


def test_a_chain_that_differs_from_the_served_bytes_is_refused_with_the_capture_and_repair_fixes(tmp_path):
    write_record(tmp_path, {"pkg/a.py": b"served\n"})
    with pytest.raises(IntegrityError) as refused:
        require_served_proof(tmp_path, ROOT, {"pkg/a.py": b"chain\n"}, {"pkg/a.py": None}, {})
    error = refused.value
    assert "pkg/a.py" in error.message and ".kvbake/served/differences.diff" in error.message
    assert error.fix is not None
    assert "init --capture" in error.fix and "overlay" in error.fix and "lock again" in error.fix
    assert "; fix: " in str(error) and "init --capture" in str(error)
