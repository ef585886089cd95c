"""``TenantCap``: per-tenant caps on running units and resources (a Filter and Reserve).

A tenant is the unit's namespace, or the value of the unit label ``tenantLabel`` when set (a
unit without the label falls back to its namespace). A tenant may hold at most
``maxRunningUnits`` units and ``maxResources`` in total (every unit holding quota counts);
``tenants`` overrides both per tenant name. A refusal says which cap and names the tenant; it
is re-tried when a unit of that tenant releases something.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import msgspec

from apis.resources import ResourceList
from controller.queueing.framework import (
    SUCCESS,
    Code,
    CycleContext,
    FilterResult,
    Status,
)
from controller.queueing.plugins.elasticquota import format_amount
from controller.queueing.units import UnitInfo, add_into

__all__ = ["TenantCap", "TenantCapArgs", "TenantLimits"]

NAME = "TenantCap"


class TenantLimits(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    max_running_units: int | None = None
    max_resources: ResourceList = ResourceList()


class TenantCapArgs(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    #: Unit label naming the tenant ("" = the namespace is the tenant).
    tenant_label: str = ""
    #: Default cap on holding units per tenant (None: no cap).
    max_running_units: int | None = None
    #: Default cap on the resources a tenant's units hold together.
    max_resources: ResourceList = ResourceList()
    #: Per-tenant caps replacing the defaults.
    tenants: dict[str, TenantLimits] = {}

    def __post_init__(self) -> None:
        for where, limits in (
            ("", TenantLimits(max_running_units=self.max_running_units)),
            *((f"tenants[{n}].", t) for n, t in self.tenants.items()),
        ):
            if limits.max_running_units is not None and limits.max_running_units < 0:
                raise ValueError(
                    f"{NAME}Args.{where}maxRunningUnits: {limits.max_running_units} "
                    "must not be negative"
                )


class TenantCap:
    name = NAME

    def __init__(self, args: TenantCapArgs) -> None:
        self.args = args
        #: tenant -> (holding units, resources held)
        self._units: dict[str, int] = {}
        self._held: dict[str, dict[str, int]] = {}
        #: unit uid -> (tenant, what it was counted with)
        self._counted: dict[str, tuple[str, Mapping[str, int]]] = {}

    def tenant(self, unit: UnitInfo) -> str:
        label = self.args.tenant_label
        if label:
            value = unit.obj.metadata.labels.get(label)
            if value:
                return value
        return unit.namespace

    def _limits(self, tenant: str) -> tuple[int | None, Mapping[str, int]]:
        override = self.args.tenants.get(tenant)
        if override is not None:
            return override.max_running_units, override.max_resources
        return self.args.max_running_units, self.args.max_resources

    def signature(self, unit: UnitInfo) -> Hashable:
        return self.tenant(unit)

    def filter(self, ctx: CycleContext, unit: UnitInfo, request: Mapping[str, int]) -> FilterResult:
        tenant = self.tenant(unit)
        max_units, max_resources = self._limits(tenant)
        key = f"tenant:{tenant}"
        if (
            max_units is not None
            and unit.uid not in self._counted
            and self._units.get(tenant, 0) + 1 > max_units
        ):
            return FilterResult(
                Status(
                    Code.UNSCHEDULABLE,
                    f"tenant {tenant} already runs {max_units} units (maxRunningUnits)",
                    plugin=NAME,
                    blockers=(key,),
                )
            )
        if max_resources:
            amounts = unit.request_of(request)
            held = self._held.get(tenant, {})
            for resource, cap in max_resources.items():
                need = amounts.get(resource, 0)
                if need and held.get(resource, 0) + need > cap:
                    return FilterResult(
                        Status(
                            Code.UNSCHEDULABLE,
                            f"tenant {tenant}: {resource} needs "
                            f"{format_amount(resource, need)}, "
                            f"{format_amount(resource, max(0, cap - held.get(resource, 0)))} "
                            f"left of maxResources {format_amount(resource, cap)}",
                            plugin=NAME,
                            blockers=(key,),
                        )
                    )
        return FilterResult(SUCCESS, request)

    def _count(self, ctx: CycleContext, unit: UnitInfo, amounts: Mapping[str, int]) -> None:
        self._uncount(ctx, unit.uid)
        tenant = self.tenant(unit)
        self._counted[unit.uid] = (tenant, dict(amounts))
        self._units[tenant] = self._units.get(tenant, 0) + 1
        add_into(self._held.setdefault(tenant, {}), amounts)

    def _uncount(self, ctx: CycleContext, uid: str) -> None:
        before = self._counted.pop(uid, None)
        if before is None:
            return
        tenant, amounts = before
        self._units[tenant] -= 1
        add_into(self._held.setdefault(tenant, {}), amounts, -1)
        ctx.bump(f"tenant:{tenant}")

    def reserve(self, ctx: CycleContext, unit: UnitInfo, replicas: Mapping[str, int]) -> Status:
        held = self._counted.get(unit.uid)
        amounts: dict[str, int] = dict(held[1]) if held is not None else dict(unit.charge)
        add_into(amounts, unit.request_of(replicas))
        self._count(ctx, unit, amounts)
        return SUCCESS

    def unreserve(self, ctx: CycleContext, unit: UnitInfo) -> None:
        self.assigned(ctx, unit)

    def assigned(self, ctx: CycleContext, unit: UnitInfo) -> None:
        if unit.holds:
            before = self._counted.get(unit.uid)
            if before is None or before[1] != unit.charge:
                self._count(ctx, unit, unit.charge)
        else:
            self._uncount(ctx, unit.uid)

    def removed(self, ctx: CycleContext, unit: UnitInfo) -> None:
        self._uncount(ctx, unit.uid)
