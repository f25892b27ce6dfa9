"""KV-cache capacity and pressure arithmetic for DeepSeek-V4/V4.1-Flash on vLLM 0.33.0 (see docs/kv_arith.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbake.kvarith.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
