"""c4prep: raw web crawl -> C4-style sharded Arrow corpus -> vocabulary -> trained models."""

__version__ = "0.1.0"
