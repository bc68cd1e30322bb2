"""The incident service's side: what talks to its API, and a local fake of it (``fake``)."""
