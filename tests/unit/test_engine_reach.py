"""The fix an unreachable engine's error gives: the ssh check to run for a node over ssh, the service for a local one."""

from __future__ import annotations

import pytest

from kvbake.engines.core.reach import LOCAL_FIX, node_reach_fix, ssh_command, unreachable_fix, unreachable_reason

CLI_REASON = ('error during connect: Get "http://docker.example.com/v1.50/info": command [ssh -o ConnectTimeout=30 -T -l ops '
              '-p 2222 -- spark-b docker system dial-stdio] has exited with exit status 255, make sure the URL is valid, and '
              'Docker 18.09 or later is installed on the remote host: stderr=ssh: connect to host spark-b port 2222: No route to host')


@pytest.mark.parametrize(("host", "command"), [
    ("ssh://ops@spark-b:2222", "ssh -p 2222 ops@spark-b docker version"),
    ("ssh://spark-b", "ssh spark-b docker version"),
])
def test_an_ssh_host_gets_the_ssh_command_that_reaches_its_engine(host, command):
    assert ssh_command(host) == command
    assert command in unreachable_fix(host) and "deploy.yaml" in unreachable_fix(host)


@pytest.mark.parametrize("host", [None, "unix:///run/docker.sock", "tcp://127.0.0.1:2375"])
def test_a_local_or_socket_host_gets_the_service_fix(host):
    assert unreachable_fix(host) == LOCAL_FIX


def test_the_reason_of_an_ssh_host_is_ssh_s_own_words():
    assert unreachable_reason("ssh://ops@spark-b:2222", CLI_REASON) == "ssh: connect to host spark-b port 2222: No route to host"


@pytest.mark.parametrize(("host", "reason"), [
    ("unix:///run/docker.sock", CLI_REASON),  # a socket's reason is kept whole
    ("ssh://ops@spark-b", "context deadline exceeded"),  # no ssh words to cut to
])
def test_other_reasons_are_kept_whole(host, reason):
    assert unreachable_reason(host, reason) == reason


def test_a_node_over_ssh_is_brought_back_by_its_ssh_check_and_a_socket_node_by_its_engine_or_host_line():
    assert "ssh -p 2222 ops@spark-b docker version" in node_reach_fix("ssh://ops@spark-b:2222")
    assert node_reach_fix("unix:///run/b.sock").startswith("bring the node's engine back")
