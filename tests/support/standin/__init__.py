"""The stand-in models the tests play against, real HTTP servers on loopback, one module per protocol they speak,
sharing what both say (:mod:`.chat`): :mod:`.openai`, an API like OpenAI's answering from a scripted policy (tool
calls, replies, malformed calls, HTTP errors), for ``agentenv eval`` and the judges; :mod:`.vllm`, vLLM's server as
OpenEnv's capture proxy and the harness need it (token ids, processed log-probs, LoRA adapters). verl's rollout
server is no HTTP server but an object verl's agent loop calls in process: tests/support/verl.py (it needs verl)."""
