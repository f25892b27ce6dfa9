"""The ship stage: push, base sync, adopt, deploy, rollback, verify-running and status on every node."""
