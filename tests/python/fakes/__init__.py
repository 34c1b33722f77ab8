"""Faithful local stand-ins for components that cannot run here (SGLang, ACR, S3 setup helpers).

Each module says which real protocol it speaks and where that protocol is documented
(../shared/reference/*.md). Production code talks to them exactly as it would talk to
the real thing: over real HTTP on loopback, through the same client code path.
"""
