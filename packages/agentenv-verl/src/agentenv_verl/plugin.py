"""agentenv plugin of agentenv-verl."""
