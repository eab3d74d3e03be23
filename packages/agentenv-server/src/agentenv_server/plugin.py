"""agentenv plugin of agentenv-server."""
