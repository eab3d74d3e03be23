"""agentenv-server (in progress)."""
