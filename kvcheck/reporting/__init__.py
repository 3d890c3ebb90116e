"""Reports for people: per-request timelines, the explanation of a violation, plain/rich/HTML
renderers and the text and JSON forms of a failure. See docs/architecture.md."""
