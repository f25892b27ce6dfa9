"""A local rig for the demo and the integration tests: a registry, node engines and an ssh gateway on loopback."""

from kvbake_rig.logins import Credentials, logged_in, login, private_client, write_htpasswd
from kvbake_rig.node_engine import NodeEngine
from kvbake_rig.registry import LocalRegistry, RegistryEndpoint
from kvbake_rig.sshd import LoopbackSshd, SshClientFiles, prepare_ssh_client
from kvbake_rig.stack import RigOptions, read_state, rig_down, rig_env, rig_up

__all__ = [
    "Credentials",
    "LocalRegistry",
    "LoopbackSshd",
    "NodeEngine",
    "RegistryEndpoint",
    "RigOptions",
    "SshClientFiles",
    "logged_in",
    "login",
    "prepare_ssh_client",
    "private_client",
    "read_state",
    "rig_down",
    "rig_env",
    "rig_up",
    "write_htpasswd",
]
