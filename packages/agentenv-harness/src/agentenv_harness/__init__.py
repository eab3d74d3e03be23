"""agentenv-harness: TRL harness rollouts on agentenv bundles (not built yet).

Planned (see the design): ``prompt_rows(bundle)`` and ``AgentEnvSessionFactory(bundle, llm_url=, model=)``,
an OpenEnv ``ResourceSessionFactory`` whose sessions run a task's own solver agent with its model calls
going through OpenEnv's capture proxy, for ``trl.experimental.async_grpo``'s harness worker. This wheel
is a shell until that work is scheduled: it installs, imports and registers nothing yet.
"""

__version__ = "0.1.0"
