"""What each subcommand does once the CLI has parsed its flags and loaded the config.

One module per subcommand (``embedctl.commands.<name>.run``): it checks what only the command cares
about, calls the engines (train, index, search, prebatch, data, eval) and prints the results. The CLI
(``embedctl.cli``) only parses and calls these; engines never import them.
"""
