"""Answer extraction, domain verifiers, the killable process pool and the reward server.

Imports nothing of the rest of the project, nor Ray, torch or vLLM.
"""
