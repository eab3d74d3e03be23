"""agentenv-harness's plugin entry point. It registers nothing until the harness integration is built."""
