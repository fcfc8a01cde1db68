"""One small module per domain, each a ``rewards.base.Verifier``; see ``rewards.registry``."""
