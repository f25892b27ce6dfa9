#!/bin/sh
# A serve wrapper as some operators mount one (--entrypoint sh ... /serve.sh): the container's command never names vLLM,
# the process it execs does.
exec python3 /opt/kvbake-standin/vllm serve /models/standin "$@"
