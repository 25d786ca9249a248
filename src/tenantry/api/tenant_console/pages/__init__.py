"""The tenant console's pages, one module each."""
