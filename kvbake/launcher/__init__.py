"""The reference vLLM launcher (`kvbake-launch-vllm`): the operator's launcher for a real vLLM serve (docs/launcher.md)."""
