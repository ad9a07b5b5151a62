"""Text before and after the model: sentences of a paragraph and what lies between them."""
