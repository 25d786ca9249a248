"""One module per console page (or family of pages), each a small router of plain route
functions that take the request's `View` as a dependency."""
