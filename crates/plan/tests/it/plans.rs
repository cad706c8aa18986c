//! End-to-end planner behaviour: the three worked examples of docs/planner.md (bar 4), launch
//! rendering snapshots, and bad input named by field (bar 5).

use ferry_plan::{
    Engine, GpuKind, Launcher, Layout, Method, MethodKind, ModelShape, Parallelism, PlanError,
    PlanRequest, Recompute, RenderOptions, ServeRequest, deepspeed_config, plan, plan_serving,
    render_train, render_vllm, shape_of,
};

fn request(id: &str, nodes: u64, gpus: u64, seq: u64, global: u64) -> PlanRequest {
    let mut r = PlanRequest::new(shape_of(id).unwrap(), id, GpuKind::H100, gpus, seq);
    r.nodes = nodes;
    r.global_batch = global;
    r
}

#[test]
fn seven_b_on_one_80gb_gpu_is_lora() {
    // Full fine-tuning needs ≥ 12 bytes/param of states (91 GB for 7.6B): it cannot fit 80 GB.
    let report = plan(&request("Qwen/Qwen2.5-7B-Instruct", 1, 1, 4096, 64)).unwrap();
    assert_eq!(report.chosen.method, MethodKind::Lora, "{report}");
    assert!(
        report.reasoning[0].contains("full fine-tuning rejected"),
        "{report}"
    );
    assert!(report.chosen.memory.required_bytes <= report.memory_per_gpu);
    assert_eq!(report.chosen.global_batch, 64);
    let cmd = render_train(&report, Launcher::Torchrun, &RenderOptions::default()).unwrap();
    insta::assert_snapshot!("torchrun_7b_lora_1gpu", cmd);
    let swift = render_train(&report, Launcher::Swift, &RenderOptions::default()).unwrap();
    insta::assert_snapshot!("swift_7b_lora_1gpu", swift);
}

#[test]
fn fourteen_b_on_eight_gpus_is_full_with_model_parallelism_or_zero() {
    let report = plan(&request("Qwen/Qwen2.5-14B-Instruct", 1, 8, 4096, 128)).unwrap();
    assert_eq!(report.chosen.method, MethodKind::Full, "{report}");
    let l = report.chosen.layout;
    // 14.8B × 16 bytes = 236 GB of states: they must be sharded (ZeRO/distributed optimizer)
    // or split (TP/PP) across the 8 GPUs.
    assert!(l.tp * l.pp > 1 || l.zero >= 1, "{report}");
    assert_eq!(l.tp * l.pp * report.chosen.dp, 8);
    assert!(!report.rejected.is_empty(), "{report}");
    let cmd = render_train(&report, Launcher::Megatron, &RenderOptions::default()).unwrap();
    insta::assert_snapshot!("megatron_14b_full_8gpu", cmd);
}

#[test]
fn seventy_two_b_on_sixteen_gpus_is_adapters_not_full() {
    let report = plan(&request("Qwen/Qwen2.5-72B-Instruct", 2, 8, 4096, 128)).unwrap();
    // Full needs 72.7B × 16 bytes = 1.16 TB of states: 73 GB per GPU on 16 GPUs before any
    // activation, which cannot fit 80 GB with a margin.
    assert_ne!(report.chosen.method, MethodKind::Full, "{report}");
    assert!(report.reasoning[0].contains("full fine-tuning rejected"));
    let cmd = render_train(&report, Launcher::Deepspeed, &RenderOptions::default()).unwrap();
    insta::assert_snapshot!("deepspeed_72b_lora_16gpu", cmd);
    insta::assert_snapshot!(
        "deepspeed_72b_lora_16gpu_config",
        deepspeed_config(&report).unwrap()
    );
}

#[test]
fn deepspeed_zero_plan_for_full_data_parallel() {
    let mut req = request("meta-llama/Meta-Llama-3-8B", 1, 8, 2048, 64);
    req.engine = Engine::Deepspeed;
    req.method = Method::Full {
        precision: Default::default(),
    };
    let report = plan(&req).unwrap();
    assert!(report.chosen.layout.zero >= 1, "{report}");
    insta::assert_snapshot!(
        "deepspeed_llama8b_full_config",
        deepspeed_config(&report).unwrap()
    );
    // The same full data-parallel plan can also be rendered for Megatron (tp = pp = 1).
    assert!(render_train(&report, Launcher::Megatron, &RenderOptions::default()).is_ok());
}

#[test]
fn megatron_refuses_lora() {
    let report = plan(&request("Qwen/Qwen2.5-7B", 1, 1, 2048, 8)).unwrap();
    let err = render_train(&report, Launcher::Megatron, &RenderOptions::default()).unwrap_err();
    assert!(matches!(err, PlanError::Unrenderable { .. }), "{err}");
}

#[test]
fn vllm_command_for_seventy_b() {
    let req = ServeRequest {
        model: shape_of("meta-llama/Meta-Llama-3-70B").unwrap(),
        model_name: "meta-llama/Meta-Llama-3-70B-Instruct".into(),
        gpu: GpuKind::H100,
        gpu_memory_bytes: 0,
        gpus_per_node: 8,
        max_model_len: 8192,
        concurrency: 32,
        gpu_memory_utilization: 0.9,
        weight_bytes: 2.0,
    };
    let p = plan_serving(&req).unwrap();
    insta::assert_snapshot!("vllm_llama70b", render_vllm(&p));
}

#[test]
fn fixed_layout_is_checked_and_explained() {
    let mut req = request("Qwen/Qwen2.5-14B", 1, 8, 4096, 64);
    req.method = Method::Full {
        precision: Default::default(),
    };
    req.parallelism = Parallelism::Fixed(Layout {
        tp: 4,
        pp: 2,
        cp: 1,
        ep: 1,
        zero: 0,
        recompute: Recompute::Selective,
        micro_batch: 1,
    });
    let report = plan(&req).unwrap();
    assert_eq!(report.chosen.layout.tp, 4);
    assert_eq!(report.chosen.dp, 1);
    assert_eq!(report.chosen.grad_accum, 64);
    // A layout that cannot fit is an error naming the overflowing term.
    req.parallelism = Parallelism::Fixed(Layout {
        tp: 1,
        pp: 1,
        cp: 1,
        ep: 1,
        zero: 0,
        recompute: Recompute::None,
        micro_batch: 8,
    });
    let err = plan(&req).unwrap_err().to_string();
    assert!(
        err.contains("nothing fits") && err.contains("largest term"),
        "{err}"
    );
}

#[test]
fn bad_input_names_the_field() {
    // Unknown architecture.
    let err = ModelShape::from_config_json(
        r#"{"model_type":"rwkv","hidden_size":8}"#,
        "rwkv/config.json",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("model_type") && err.contains("rwkv/config.json"),
        "{err}"
    );
    // Missing field.
    let err = ModelShape::from_config_json(
        r#"{"model_type":"qwen2","hidden_size":896,"num_hidden_layers":24,"num_attention_heads":14,"intermediate_size":4864}"#,
        "q/config.json",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("`vocab_size`"), "{err}");
    // Zero GPUs.
    let mut req = request("Qwen/Qwen2.5-7B", 1, 0, 2048, 8);
    let err = plan(&req).unwrap_err().to_string();
    assert!(err.contains("resources.gpusPerNode"), "{err}");
    req.gpus_per_node = 8;
    req.nodes = 0;
    assert!(
        plan(&req)
            .unwrap_err()
            .to_string()
            .contains("resources.nodes")
    );
    // A global batch no layout reaches: LoRA is data-parallel only, 16 ranks, batch 3.
    let mut req = request("Qwen/Qwen2.5-7B", 2, 8, 2048, 3);
    req.method = Method::Lora { rank: 16 };
    let err = plan(&req).unwrap_err();
    assert!(matches!(err, PlanError::UnreachableBatch { .. }), "{err}");
    assert!(err.to_string().contains("train.globalBatch"), "{err}");
    // Unknown catalogue id.
    let err = shape_of("acme/Unknown-7B").unwrap_err().to_string();
    assert!(
        err.contains("model.id") && err.contains("model.path"),
        "{err}"
    );
    // A fixed layout that does not divide the GPUs.
    let mut req = request("Qwen/Qwen2.5-7B", 1, 8, 2048, 8);
    req.parallelism = Parallelism::Fixed(Layout {
        tp: 3,
        pp: 1,
        cp: 1,
        ep: 1,
        zero: 0,
        recompute: Recompute::None,
        micro_batch: 1,
    });
    assert!(
        plan(&req)
            .unwrap_err()
            .to_string()
            .contains("parallelism.tp")
    );
}

#[test]
fn memory_grows_with_tokens_and_shrinks_with_sharding() {
    use ferry_plan::{Recipe, Task, TrainSetup, training_memory};
    let shape = shape_of("meta-llama/Meta-Llama-3-8B").unwrap();
    let base = Layout {
        tp: 1,
        pp: 1,
        cp: 1,
        ep: 1,
        zero: 0,
        recompute: Recompute::None,
        micro_batch: 1,
    };
    let peak = |layout: Layout, dp: u64, seq: u64, recipe: Recipe| {
        training_memory(&TrainSetup {
            model: &shape,
            recipe,
            lora_rank: 16,
            layout,
            dp,
            micro_batches: 4,
            seq_len: seq,
            task: Task::Sft,
            gpu: GpuKind::H100,
            engine: Engine::Deepspeed,
        })
        .peak_bytes
    };
    for recipe in [
        Recipe::DeepspeedBf16,
        Recipe::Lora,
        Recipe::Qlora,
        Recipe::HfAmp,
    ] {
        let mut last = 0;
        for seq in [512, 1024, 2048, 4096, 8192] {
            let p = peak(base, 1, seq, recipe);
            assert!(p > last, "{recipe:?} seq {seq}");
            last = p;
        }
        for r in [Recompute::Selective, Recompute::Full] {
            assert!(
                peak(
                    Layout {
                        recompute: r,
                        ..base
                    },
                    1,
                    4096,
                    recipe
                ) < peak(base, 1, 4096, recipe)
            );
        }
    }
    let full = Recipe::DeepspeedBf16;
    let mut last = u64::MAX;
    for zero in 0..=3u8 {
        let p = peak(Layout { zero, ..base }, 8, 2048, full);
        assert!(p <= last, "zero {zero}");
        last = p;
    }
    assert!(
        peak(Layout { tp: 2, ..base }, 1, 2048, Recipe::MegatronBf16)
            < peak(base, 1, 2048, Recipe::MegatronBf16)
    );
    assert!(peak(base, 1, 2048, Recipe::Qlora) < peak(base, 1, 2048, Recipe::Lora));
}

#[test]
fn extreme_requests_answer_without_panicking() {
    for id in [
        "openai-community/gpt2",
        "Qwen/Qwen3-30B-A3B",
        "meta-llama/Meta-Llama-3-70B",
    ] {
        for seq in [1u64, 1 << 20, 1 << 24, (1 << 24) + 1] {
            for global in [0u64, 1, 7, 1 << 32, u64::MAX] {
                for (nodes, gpus) in [(1u64, 1u64), (3, 8), (1, 1024)] {
                    let mut req = request(id, nodes, gpus, seq, global);
                    req.train_sequences = u64::MAX;
                    match plan(&req) {
                        Ok(report) => {
                            assert!(report.chosen.memory.required_bytes <= report.memory_per_gpu)
                        }
                        Err(e) => assert!(!e.to_string().is_empty()),
                    }
                }
            }
        }
    }
}

#[test]
fn long_context_uses_context_or_tensor_parallelism() {
    // 64K tokens: one sequence's activations alone exceed a GPU, so the sequence must be split.
    let mut req = request("Qwen/Qwen2.5-7B", 1, 8, 65536, 8);
    req.method = Method::Full {
        precision: Default::default(),
    };
    let report = plan(&req).unwrap();
    let l = report.chosen.layout;
    println!("{report}");
    assert!(l.cp * l.tp >= 2, "{report}");
    let cmd = render_train(&report, Launcher::Megatron, &RenderOptions::default()).unwrap();
    if l.cp > 1 {
        assert!(cmd.contains(&format!("--context-parallel-size {}", l.cp)));
    }
}

#[test]
fn json_output_carries_peak_bytes_and_every_term() {
    let report = plan(&request("Qwen/Qwen2.5-7B", 1, 8, 2048, 64)).unwrap();
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    let memory = &json["chosen"]["memory"];
    assert_eq!(
        memory["peak_bytes"].as_u64().unwrap(),
        report.chosen.memory.peak_bytes
    );
    for term in [
        "weights",
        "grads",
        "optimizer",
        "master",
        "activations",
        "logits",
        "context",
        "required_bytes",
    ] {
        assert!(memory[term].is_u64(), "{term} missing in {memory}");
    }
    assert!(
        json["chosen"]["throughput"]["tokens_per_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );
}

#[test]
fn mixture_of_experts_plans_split_experts() {
    let report = plan(&request("mistralai/Mixtral-8x7B-v0.1", 2, 8, 4096, 128)).unwrap();
    println!("{report}");
    let c = &report.chosen;
    assert_eq!(c.method, MethodKind::Full, "{report}");
    // 46.7B parameters: states must be split by TP/PP/EP; only 12.9B are active per token.
    assert!(c.layout.tp * c.layout.pp * c.layout.ep > 1);
    assert!(report.params.active < report.params.total / 3);
    let cmd = render_train(&report, Launcher::Megatron, &RenderOptions::default()).unwrap();
    assert!(cmd.contains("--num-experts 8") && cmd.contains("--moe-router-topk 2"));
    if c.layout.ep > 1 {
        assert!(cmd.contains(&format!("--expert-model-parallel-size {}", c.layout.ep)));
    }
    // EP on a dense model is refused with the field named.
    let mut req = request("Qwen/Qwen2.5-7B", 1, 8, 2048, 8);
    req.parallelism = Parallelism::Fixed(Layout {
        tp: 1,
        pp: 1,
        cp: 1,
        ep: 2,
        zero: 1,
        recompute: Recompute::None,
        micro_batch: 1,
    });
    assert!(
        plan(&req)
            .unwrap_err()
            .to_string()
            .contains("parallelism.ep")
    );
}

/// A gang split across racks runs slower by what its traffic between nodes loses to the slower
/// links: full fine-tuning (every weight's gradient crosses the network) more than LoRA (only
/// the adapters'), more as the links get slower, not at all on one node or at full bandwidth.
#[test]
fn a_split_costs_what_the_traffic_between_nodes_loses() {
    let slowdown = |method: Method, nodes: u64, inter_rack_pct: u32| {
        let mut req = request("meta-llama/Meta-Llama-3-8B", nodes, 8, 4096, 64);
        req.method = method;
        let report = plan(&req).unwrap();
        ferry_plan::split_slowdown_pct(&req, &report.chosen, inter_rack_pct)
    };
    let full = Method::from_mode("full", 0).unwrap();
    let lora = Method::from_mode("lora", 16).unwrap();
    let by_links: Vec<u32> = [100, 50, 25, 10, 1]
        .map(|pct| slowdown(full, 4, pct))
        .into();
    assert_eq!(by_links[0], 0, "{by_links:?}");
    assert!(by_links.windows(2).all(|w| w[0] <= w[1]), "{by_links:?}");
    assert!(by_links[3] > 0, "{by_links:?}");
    // Llama-3-8B, full, 32 H100s: 0, 3, 48, 217 and 1000 (the cap) percent.
    assert_eq!(by_links[4], 1000, "{by_links:?}");
    assert!(slowdown(lora, 4, 10) < by_links[3], "{by_links:?}");
    assert_eq!(slowdown(full, 1, 10), 0, "one node is never split");
}
