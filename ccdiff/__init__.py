"""ccdiff: differential conformance testing of QUIC congestion controllers."""
__version__ = "0.1.0"
