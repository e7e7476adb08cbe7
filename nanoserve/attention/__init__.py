"""nanoserve.attention"""
