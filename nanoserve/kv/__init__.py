"""nanoserve.kv"""
