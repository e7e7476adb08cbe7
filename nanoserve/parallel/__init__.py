"""nanoserve.parallel"""
