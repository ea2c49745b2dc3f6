//! The run as JSON: machine, parameters, skipped targets, every cell's numbers per target with
//! Iris's ratios, the goals, and the applications.

use serde_json::{json, Map, Value};

use super::report::Report;
use super::results::Outcome;

/// The JSON document of `report`.
pub fn document(report: &Report) -> Value {
    let m = &report.machine;
    json!({
        "machine": {
            "cpu_count": m.cpu_count,
            "cpu_model": m.cpu_model,
            "kernel": m.kernel,
            "memory_bytes": m.memory_bytes,
            "fio": m.fio,
            "pages": m.pages,
        },
        "command": report.command,
        "started_utc": report.started_utc,
        "load_average_start": report.load[0],
        "load_average_end": report.load[1],
        "quick": report.quick,
        "runtime_secs": report.runtime_secs,
        "rounds": report.rounds,
        "memcpy_secs": report.memcpy_secs,
        "file_bytes": report.file_bytes,
        "targets": report.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "skipped": report.skipped.iter().map(|(k, why)| json!({
            "target": k.name(),
            "reason": why,
        })).collect::<Vec<_>>(),
        "cells": report.results.iter().map(|r| {
            let mut by_target = Map::new();
            for (kind, outcome) in &r.by_target {
                let mut v = outcome_json(outcome);
                if let (Some(runs), Some(o)) = (r.runs.get(kind), v.as_object_mut()) {
                    // With several rounds: every run's IOPS (the median run's figures above).
                    o.insert("iops_runs".to_string(), json!(runs));
                }
                by_target.insert(kind.name().to_string(), v);
            }
            json!({
                "label": r.cell.label(),
                "rw": r.cell.rw.fio_name(),
                "block_bytes": r.cell.block_bytes,
                "jobs": r.cell.jobs,
                "mode": r.cell.mode.name(),
                "results": by_target,
                "best_kernel": r.best_kernel().map(|(k, _)| k.name()),
                "iris_over_best_kernel": r.iris_over_best_kernel(),
                "iris_over_floor": r.iris_over(super::targets::TargetKind::Floor),
            })
        }).collect::<Vec<_>>(),
        "goals": report.goals.iter().map(|g| json!({
            "goal": g.name,
            "required": g.required,
            "measured": g.measured,
            "met": g.met(),
        })).collect::<Vec<_>>(),
        "apps": report.apps.iter().map(|a| json!({
            "name": a.name,
            "workload": a.detail,
            "iris_ops_per_sec": a.iris.as_ref().ok(),
            "iris_error": a.iris.as_ref().err(),
            "ext4_ops_per_sec": a.ext4.as_ref().ok(),
            "ext4_error": a.ext4.as_ref().err(),
            "unsynced_tmpfs_ops_per_sec": a.unsynced.as_ref().ok(),
            "unsynced_tmpfs_error": a.unsynced.as_ref().err(),
            "iris_over_ext4": a.ratio(),
            "iris_over_unsynced_tmpfs": a.of_unsynced(),
        })).collect::<Vec<_>>(),
    })
}

fn outcome_json(outcome: &Outcome) -> Value {
    match outcome {
        Ok(m) => json!({ "iops": m.iops, "mean_ns": m.mean_ns, "p99_ns": m.p99_ns }),
        Err(why) => json!({ "error": why }),
    }
}
