"""Command-line front ends: parse, load config, call an engine. No logic lives here."""
