"""Pure reporting: session summary rows, JUnit properties, results files and merging them."""
