"""Video sources: :mod:`.base` holds the :class:`Frame` record, the :class:`VideoSource` interface and the
file source; :mod:`.factory` holds every other kind (image folders, cameras, streams) and :func:`open_source`,
the one factory over URIs.  ``jetforge.apps.video`` re-exports the public names."""
