"""Named configuration presets shipped with c4prep (YAML files in config groups)."""
