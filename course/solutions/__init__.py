"""Solutions to the chapters' exercises: `chNN.py` holds SOLUTIONS (pass the checkers), WRONG (typical
mistakes the checkers must reject) and EXPLANATIONS (written answers). Hand-written; CI checks them."""
