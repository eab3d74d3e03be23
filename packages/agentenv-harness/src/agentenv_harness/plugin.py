"""agentenv plugin of agentenv-harness."""
