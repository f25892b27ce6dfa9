"""What a command hands back, (data for --json, text for people), and how the CLI prints it."""

from __future__ import annotations

import argparse
import json

Result = tuple[dict, str]


def emit(args: argparse.Namespace, data: dict, text: str) -> None:
    print(json.dumps(data, indent=1, sort_keys=True) if args.json else text)
