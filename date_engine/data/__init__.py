"""Data sets in the formats people have on disk, and the small in-memory helpers recipes share."""
