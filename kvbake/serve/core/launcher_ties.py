"""How a serve is still tied to the launcher that started it, read from its container and processes, and how to retire it."""

# A serve kvbake adopts must be kvbake's to stop and start. Two ties let the operator's old launcher stop it anyway:
# - a container started by `docker run` in the foreground (vLLM's run_cluster.sh): while the script waits on it, the
#   script's exit (Ctrl-C, a closed terminal) stops the container, and run_cluster.sh's EXIT trap then removes it by
#   name: the serve kvbake keeps to roll back to, or a container kvbake later gives that name;
# - vLLM started by an interactive `docker exec` (`docker exec -it NODE bash` in a second terminal, as run_cluster.sh's
#   usage says; eugr's `launch-cluster.sh exec`, which always passes -i): its input and output belong to that client, not
#   to the container; when the command ends, eugr's script stops the whole cluster, and a client that goes away leaves
#   vLLM writing into a pipe nobody reads.
# procfs shows the second as vLLM's standard input: a pipe or a terminal only an interactive exec gives (a detached or a
# plain `docker exec` gives /dev/null). A plain attached exec without -i looks from inside exactly like a detached one
# (both write into a pipe of the engine's), and only the engine's exec record tells them apart, which its CLI does not
# show: that one is not named, and the runbook says to retire it all the same.
# A detached container can still be a launcher's: one named as a launcher's exit trap stops by name (eugr's vllm_node
# after `launch-cluster.sh start -d`, run_cluster.sh's node-<n>) is stopped whenever a run of that script ends, and
# nothing in the container shows whether one still runs. init and adopt name it (`trap_ties`); it does not stop adopt.
# The engine cannot say whether the client still runs, so adopt names each tie and needs the operator's word that the
# launcher is retired (`adopt --launcher-retired`); docs/launchers.md, "Retire your launcher", says how per launcher.

from __future__ import annotations

from typing import Any, Mapping

from kvbake.names import trapped_name
from kvbake.serve.core.serve_reading import SHELLS, ServeReading

RUNBOOK = "docs/launchers.md, Retire your launcher"
CLIENT_INPUTS = ("pipe:", "/dev/pts/", "/dev/tty")  # an input only an interactive `docker exec` (-i, -t) gives


def started_in_foreground(container: Mapping[str, Any]) -> bool:
    """Whether `docker run` created the container attached to its client (without --detach)."""
    config = container.get("Config") or {}
    return bool(config.get("AttachStdout") or config.get("AttachStderr"))


def interactive_shell(argv: tuple[str, ...]) -> bool:
    """`bash -i -c …` and the like: the interactive shell eugr's `launch-cluster.sh exec` runs the command in."""
    return bool(argv) and argv[0].rsplit("/", 1)[-1] in SHELLS and any(
        token.startswith("-") and not token.startswith("--") and "i" in token for token in argv[1:3])


def reads_its_client(process_input: str) -> bool:
    """Whether a process's standard input is a `docker exec` client's: a pipe (-i) or a terminal (-t)."""
    return process_input.startswith(CLIENT_INPUTS)


def launcher_ties(node: str, container: Mapping[str, Any], reading: ServeReading) -> list[str]:
    """Each way the serve is still tied to its launcher, as one line naming the container, the tie and its danger."""
    name = str(container.get("Name", "")).lstrip("/")
    ties = []
    if started_in_foreground(container):
        ties.append(f"{node}: {name} was started by `docker run` in the foreground (run_cluster.sh starts its node-<n> so): "
                    f"the script's exit stops it and run_cluster.sh's EXIT trap removes it by name")
    log = reading.main.stdout if reading.main is not None else ""
    for serving in reading.serving:
        attached = serving.execd and reads_its_client(serving.process.stdin) and serving.process.stdout != log
        if attached:
            how = ("an interactive shell of `docker exec` (eugr's launch-cluster.sh exec: when it ends, the script stops the "
                   "whole cluster)" if interactive_shell(serving.root.argv) else "the interactive `docker exec` that started it")
            ties.append(f"{node}: its vLLM (pid {serving.process.pid}) writes to {how}, not to {name}'s log")
    return ties


def trap_ties(node: str, container: Mapping[str, Any]) -> list[str]:
    """A detached container named as a launcher's exit trap stops by name, as one line; none for any other."""
    name = str(container.get("Name", "")).lstrip("/")
    trap = trapped_name(name)
    if trap is None or started_in_foreground(container):  # a foreground one is named by launcher_ties, trap and all
        return []
    return [f"{node}: {name} bears a name a launcher's exit trap stops ({trap}): a run of that script that is still going "
            f"(a terminal, tmux, a service) stops this serve when it ends"]
