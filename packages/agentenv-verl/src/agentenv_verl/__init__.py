"""agentenv-verl (in progress)."""
