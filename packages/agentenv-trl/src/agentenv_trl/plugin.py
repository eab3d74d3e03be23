"""agentenv plugin of agentenv-trl."""
