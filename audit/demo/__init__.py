"""Deterministic demo data: the simulator (``audit simulate``, ``audit demo``)."""

from audit.demo.simulate import FaultPlan, SimulationResult, plan_faults, simulate

__all__ = ["FaultPlan", "SimulationResult", "plan_faults", "simulate"]
