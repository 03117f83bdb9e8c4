"""Wire codecs: msgpack with msgpack-numpy nd-maps, JSON, request schemas, content negotiation."""
