"""nanoserve.engine"""
