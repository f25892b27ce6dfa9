"""The local rig: `up --dir DIR [--nodes N] [--tls] [--auth]`, then `env --dir DIR` and `down --dir DIR`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvbake.errors import KvbakeError  # noqa: E402
from kvbake_rig.stack import RigOptions, rig_down, rig_env, rig_up  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rig.py", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start a registry and node engines; the last node is reached over ssh")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--tls", action="store_true", help="serve the registry over TLS with a generated CA")
    up.add_argument("--auth", action="store_true", help="require htpasswd auth and log in into DIR/docker-config")
    for name, text in (("env", "print shell exports for a running rig"), ("down", "stop the rig and remove its files")):
        commands.add_parser(name, help=text)
    for command in commands.choices.values():
        command.add_argument("--dir", type=Path, required=True, help="the rig's folder (holds state.json)")
    return parser


def _print_env(folder: Path) -> None:
    env = rig_env(folder)
    for key, value in env.items():
        print(f"export {key}={shlex.quote(value)}")
    print(f'export PATH={shlex.quote(env["KVBAKE_RIG_SSH_BIN"])}:"$PATH"')


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; errors become one line on stderr and their exit code."""
    args = _parser().parse_args(argv)
    folder = args.dir.resolve()
    try:
        if args.command == "up":
            state = rig_up(folder, RigOptions(nodes=args.nodes, tls=args.tls, auth=args.auth))
            print(json.dumps(state, indent=2, sort_keys=True))
        elif args.command == "env":
            _print_env(folder)
        else:
            rig_down(folder)
    except KvbakeError as err:
        print(f"rig: {err.title}: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
