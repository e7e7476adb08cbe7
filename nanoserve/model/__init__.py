"""nanoserve.model"""
