"""The `shoal` command line (typer + rich); `main.app` is the console script."""
