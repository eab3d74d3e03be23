"""agentenv-trl (in progress)."""
