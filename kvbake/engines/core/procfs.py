"""The probes kvbake runs inside a serving container to read its processes from procfs, and their answers as values."""

# Each probe is Python source for the container's own python3, run by `docker exec` as root with `-I -S` (no user site,
# no environment variables, no site-packages: nothing of the serve can change what the probe reads). It needs only the
# modules of a minimal Python (no json), and prints one Python literal, which kvbake reads with ast.literal_eval.

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

PROBE_MARK = "kvbake-procfs-probe"

# Every process: pid, parent, argv, environment, working directory, executable and where its output goes. Root in a
# container without CAP_SYS_PTRACE cannot read another user's environment or working directory (a serve started by
# gosu or su): such a process is listed as unread with its user, and the probe runs again as that user
# (`unread_users`).
PROCESSES = f"""
import os, sys
MARK = {PROBE_MARK!r}
def text(data):
    return data.decode("utf-8", "backslashreplace")
def fields(path):
    with open(path, "rb") as handle:
        return [text(item) for item in handle.read().split(b"\\0")[:-1]]
found = []
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    base = "/proc/" + name
    try:
        argv = fields(base + "/cmdline")
        with open(base + "/status") as status:
            lines = dict(line.split(":", 1) for line in status if ":" in line)
        ppid, uid = int(lines["PPid"].split()[0]), int(lines["Uid"].split()[0])
    except (OSError, KeyError, IndexError, ValueError):
        continue
    if not argv or MARK in argv:
        continue
    try:
        env = fields(base + "/environ")
        cwd, exe = os.readlink(base + "/cwd"), os.readlink(base + "/exe")
    except OSError:
        found.append({{"pid": int(name), "uid": uid, "unread": True}})
        continue
    streams = []
    for fd in ("0", "1"):
        try:
            streams.append(os.readlink(base + "/fd/" + fd))
        except OSError:
            streams.append("")
    found.append({{"pid": int(name), "ppid": ppid, "uid": uid, "argv": argv, "env": env, "cwd": cwd, "exe": exe,
                  "stdin": streams[0], "stdout": streams[1]}})
print(repr(sorted(found, key=lambda p: p["pid"])))
"""

# For each process given (executable, environment, working directory, first sys.path entry): where `import vllm`
# resolves under exactly those, the sys.path it searches, and the start-up hooks that interpreter runs before any
# serve code (site, sitecustomize, usercustomize, every .pth file on that sys.path, the modules a .pth file's `import`
# lines load, and the modules each of those Python files imports by name, wherever they live: each by its path on
# sys.path and, when that is a link, by its real path too, with its sha256). A module reached only through another
# module's imports is not followed further.
# Run by the process's own interpreter in a child.
ORIGINS = f"""
import ast, subprocess, sys
MARK = {PROBE_MARK!r}
CHILD = "import ast, hashlib, importlib.util, os, sys\\n" \\
        "first = sys.argv[1]\\n" \\
        "if sys.path and sys.path[0] in ('', '.'):\\n" \\
        "    sys.path[0:1] = [first] if first != '-' else []\\n" \\
        "spec = importlib.util.find_spec('vllm')\\n" \\
        "hooks = set()\\n" \\
        "def add_module(name):\\n" \\
        "    top = name.split('.')[0]\\n" \\
        "    try:\\n" \\
        "        found = importlib.util.find_spec(top) if top.isidentifier() else None\\n" \\
        "    except (ImportError, ValueError):\\n" \\
        "        found = None\\n" \\
        "    if found is not None and found.origin and os.path.isfile(found.origin):\\n" \\
        "        hooks.add(found.origin)\\n" \\
        "for entry in sys.path:\\n" \\
        "    try:\\n" \\
        "        names = os.listdir(entry or '.')\\n" \\
        "    except OSError:\\n" \\
        "        continue\\n" \\
        "    hooks.update(os.path.join(entry, n) for n in names if n in ('sitecustomize.py', 'usercustomize.py') or n.endswith('.pth'))\\n" \\
        "for name in ('site', 'sitecustomize', 'usercustomize'):\\n" \\
        "    module = sys.modules.get(name)\\n" \\
        "    where = getattr(module, '__file__', None) or getattr(getattr(module, '__spec__', None), 'origin', None)\\n" \\
        "    if where and os.path.isfile(where):\\n" \\
        "        hooks.add(where)\\n" \\
        "for path in [p for p in hooks if p.endswith('.pth')]:\\n" \\
        "    try:\\n" \\
        "        lines = open(path, encoding='utf-8', errors='replace').read().splitlines()\\n" \\
        "    except OSError:\\n" \\
        "        continue\\n" \\
        "    for line in lines:\\n" \\
        "        if line.startswith(('import ', 'import\\\\t')):\\n" \\
        "            for part in line[7:].split(';')[0].split(','):\\n" \\
        "                add_module(part.strip().split(' ')[0])\\n" \\
        "for path in [p for p in hooks if p.endswith('.py')]:\\n" \\
        "    try:\\n" \\
        "        tree = ast.parse(open(path, 'rb').read())\\n" \\
        "    except (OSError, SyntaxError, ValueError):\\n" \\
        "        continue\\n" \\
        "    for node in ast.walk(tree):\\n" \\
        "        if isinstance(node, ast.Import):\\n" \\
        "            for alias in node.names:\\n" \\
        "                add_module(alias.name)\\n" \\
        "        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:\\n" \\
        "            add_module(node.module)\\n" \\
        "digests = {{}}\\n" \\
        "for path in hooks:\\n" \\
        "    try:\\n" \\
        "        with open(path, 'rb') as handle:\\n" \\
        "            digest = hashlib.sha256(handle.read()).hexdigest()\\n" \\
        "    except OSError:\\n" \\
        "        continue\\n" \\
        "    for where in {{os.path.abspath(path), os.path.realpath(path)}}:\\n" \\
        "        digests[where] = digest\\n" \\
        "print(repr({{'origin': spec.origin if spec else None, 'path': sys.path, 'hooks': digests}}))\\n"
answers = []
for item in ast.literal_eval(sys.argv[1]):
    env = dict(entry.split("=", 1) for entry in item["env"] if "=" in entry)
    try:
        done = subprocess.run([item["exe"], "-c", CHILD, item["first"], MARK], env=env, cwd=item["cwd"], capture_output=True,
                              text=True, timeout=60)
        answer = ast.literal_eval(done.stdout.strip()) if done.returncode == 0 else {{"error": done.stderr.strip().splitlines()[-1:] or ["exit " + str(done.returncode)]}}
    except (OSError, ValueError, SyntaxError, subprocess.TimeoutExpired) as err:
        answer = {{"error": [type(err).__name__ + ": " + str(err)]}}
    answers.append(answer)
print(repr(answers))
"""


@dataclass(frozen=True)
class Process:
    """One process of a container as procfs shows it from inside: ids in the container's own PID namespace."""

    pid: int
    ppid: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(hash=False)
    cwd: str
    exe: str
    uid: int = 0
    stdout: str = ""  # where its output goes (the target of fd 1: `pipe:[N]`, `/dev/null`, a file), "" when unread
    stdin: str = ""  # where its input comes from (the target of fd 0), "" when unread


@dataclass(frozen=True)
class ImportOrigin:
    """Where `import vllm` resolves for one process (None: nowhere), and the sys.path it searched; or why unknown."""

    origin: str | None
    path: tuple[str, ...]
    error: str | None = None
    hooks: tuple[tuple[str, str], ...] = ()  # (path, sha256) of each start-up hook its interpreter runs; a link twice


def environment(entries: Sequence[str]) -> dict[str, str]:
    """NAME=VALUE entries as a mapping; a later entry of a name wins, as in a process's environment."""
    result = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if sep:
            result[name] = value
    return result


def parse_processes(text: str) -> tuple[Process, ...]:
    """The PROCESSES probe's answer as values, less the processes it could not read; ValueError for anything else."""
    return tuple(Process(int(p["pid"]), int(p["ppid"]), tuple(str(a) for a in p["argv"]), environment(p["env"]), str(p["cwd"]),
                         str(p["exe"]), int(p.get("uid", 0)), str(p.get("stdout", "")), str(p.get("stdin", ""))) for p in _probe_list(text) if not p.get("unread"))


def unread_users(text: str) -> tuple[int, ...]:
    """The users whose processes the PROCESSES probe could not read (to be read again as each of them)."""
    return tuple(sorted({int(p["uid"]) for p in _probe_list(text) if p.get("unread")}))


def merged_processes(*readings: Sequence[Process]) -> tuple[Process, ...]:
    """Several readings of one container's processes as one, each pid once, in pid order."""
    by_pid = {p.pid: p for reading in readings for p in reading}
    return tuple(by_pid[pid] for pid in sorted(by_pid))


def _probe_list(text: str) -> list[dict]:
    data = _literal(text)
    if not isinstance(data, list) or not all(isinstance(p, dict) for p in data):
        raise ValueError("the process probe did not answer a list")
    return data


def origins_request(processes: Sequence[Process], first_entries: Sequence[str]) -> str:
    """The ORIGINS probe's argument: each process's executable, environment, working directory and the first sys.path
    entry its command line gives (`-` for none)."""
    return repr([{"exe": p.exe, "env": [f"{k}={v}" for k, v in p.env.items()], "cwd": p.cwd, "first": first}
                 for p, first in zip(processes, first_entries)])


def parse_origins(text: str, count: int) -> tuple[ImportOrigin, ...]:
    """The ORIGINS probe's answer, one per process asked; ValueError for anything else."""
    data = _literal(text)
    if not isinstance(data, list) or len(data) != count:
        raise ValueError("the import probe did not answer one entry per process")
    return tuple(_origin(item) for item in data)


def _literal(text: str) -> Any:
    """A probe's printed literal (lists, dicts, strings, numbers, None); never evaluated as code."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError) as err:
        raise ValueError(f"a probe's answer is not a literal ({type(err).__name__})") from None


def _origin(item: Any) -> ImportOrigin:
    if not isinstance(item, dict):
        raise ValueError("an import probe entry is not an object")
    if "error" in item:
        return ImportOrigin(None, (), " ".join(str(x) for x in item["error"]) or "unknown")
    hooks = item.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise ValueError("an import probe's start-up hooks are not a mapping")
    return ImportOrigin(item.get("origin"), tuple(str(p) for p in item.get("path") or ()),
                        hooks=tuple(sorted((str(path), str(digest)) for path, digest in hooks.items())))
