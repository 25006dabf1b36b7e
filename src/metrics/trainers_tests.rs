//! Unit tests of `metrics::trainers`: each trainer recognised by its keys and arguments, and
//! what its mapping replaces.

use super::*;

fn keys(header: &str) -> Vec<String> {
    header.split(',').map(|k| k.trim().to_string()).collect()
}

fn args(file: &str, text: &str) -> Vec<RunArgs> {
    vec![RunArgs {
        file: file.into(),
        values: top_level_scalars(text),
    }]
}

#[test]
fn yaml_scalars_at_the_top_level_only() {
    let v = top_level_scalars(
        "epochs: 25\nhyp:\n  lr0: 0.01\nname: 'exp' # a comment\nmodel: !!python/object:x.Y\n- a\n",
    );
    assert_eq!(v.get("epochs").map(String::as_str), Some("25"));
    assert_eq!(v.get("name").map(String::as_str), Some("exp"));
    assert!(!v.contains_key("lr0") && !v.contains_key("model"));
}

#[test]
fn yolo_reads_pg1_counts_epochs_and_takes_epochs_from_args() {
    let k = keys(
        "epoch,time,train/box_loss,train/cls_loss,train/dfl_loss,val/box_loss,lr/pg0,lr/pg1,lr/pg2",
    );
    let t = recognise(
        LogFormat::Csv,
        &k,
        Some(1),
        &args("args.yaml", "epochs: 150\nlr0: 0.01\n"),
    )
    .unwrap();
    assert_eq!(
        (t.unit, t.step.as_str(), t.lr.as_deref()),
        (StepUnit::Epoch, "epoch", Some("lr/pg1"))
    );
    assert_eq!(t.total.as_ref().map(|t| t.0), Some(150));
    assert_eq!(t.time, Some(("time".into(), Clock::Elapsed)));
    // YOLOv5 and early v8 count from 0: the last epoch of 25 is 24.
    let k5 = keys("epoch,train/box_loss,train/obj_loss,val/box_loss,x/lr0,x/lr1,x/lr2");
    let t = recognise(
        LogFormat::Csv,
        &k5,
        Some(0),
        &args("opt.yaml", "epochs: 25\n"),
    )
    .unwrap();
    assert_eq!(
        (t.lr.as_deref(), t.total.map(|t| t.0), t.time),
        (Some("x/lr1"), Some(24), None)
    );
}

#[test]
fn detectron2_mmengine_keras_timm() {
    let d2 = keys("data_time,iteration,loss_cls,lr,time,total_loss");
    let t = recognise(LogFormat::Jsonl, &d2, None, &[]).unwrap();
    assert_eq!(
        (t.step.as_str(), t.loss.as_deref(), t.time.clone()),
        ("iteration", Some("total_loss"), None)
    );
    let (mut m, mut chosen) = (MetricsConfig::default(), Vec::new());
    t.apply(&mut m, &mut chosen, &mut Vec::new());
    assert!(
        m.time.is_empty() && chosen.contains(&("time", "\"\"".into())),
        "{chosen:?}"
    );
    let mm = keys("lr,data_time,loss,time,epoch,iter,memory,step,accuracy/top1");
    let t = recognise(LogFormat::Jsonl, &mm, None, &[]).unwrap();
    assert_eq!((t.step.as_str(), t.unit), ("iter", StepUnit::Step));
    let keras = keys("epoch,accuracy,loss,val_accuracy,val_loss");
    let t = recognise(LogFormat::Csv, &keras, Some(0), &[]).unwrap();
    assert_eq!(
        (t.unit, t.loss.as_deref(), t.eval_loss.as_deref(), t.lr),
        (StepUnit::Epoch, Some("loss"), Some("val_loss"), None)
    );
    let timm = keys("epoch,train_loss,eval_loss,eval_top1,eval_top5,lr");
    let t = recognise(
        LogFormat::Csv,
        &timm,
        Some(0),
        &args("args.yaml", "epochs: 300\n"),
    )
    .unwrap();
    assert_eq!(
        (t.lr.as_deref(), t.total.map(|t| t.0)),
        (Some("lr"), Some(299))
    );
    // timm runs its cooldown after `epochs`, and counts from 0 a resumed run too.
    let t = recognise(
        LogFormat::Csv,
        &timm,
        Some(1),
        &args(
            "args.yaml",
            "cooldown_epochs: 10
epochs: 100
",
        ),
    )
    .unwrap();
    assert_eq!(t.total.map(|t| t.0), Some(109));
    // LLaMA-Factory's JSON lines: `epoch` and `loss` beside their own step.
    let lf = keys("current_steps,epoch,loss,lr,total_steps");
    assert!(recognise(LogFormat::Jsonl, &lf, Some(10), &[]).is_none());
    // Lightning's metrics.csv: its steps; hparams.yaml's max_steps is the total.
    let t = recognise(
        LogFormat::Csv,
        &keys("epoch,step,train_loss,val_loss"),
        Some(0),
        &args("hparams.yaml", "max_steps: 187500\nmax_epochs: -1\n"),
    )
    .unwrap();
    assert_eq!(
        (t.unit, t.total.map(|t| t.0)),
        (StepUnit::Step, Some(187499))
    );
    // Without a total in its arguments: not one of these.
    assert!(recognise(
        LogFormat::Csv,
        &keys("epoch,step,train_loss,val_loss"),
        Some(0),
        &[]
    )
    .is_none());
}

#[test]
fn an_mlflow_run_per_epoch_takes_its_epochs_param() {
    let a = vec![RunArgs {
        file: "params".into(),
        values: [("epochs".to_string(), "30".to_string())].into(),
    }];
    assert_eq!(epoch_axis(&a, 1, 29).map(|t| t.0), Some(30));
    assert_eq!(
        epoch_axis(&a, 0, 29).map(|t| t.0),
        Some(29),
        "counted from 0"
    );
    assert_eq!(
        epoch_axis(&a, 0, 5000),
        None,
        "steps past the epochs: the axis is steps"
    );
    assert_eq!(epoch_axis(&[], 0, 3), None);
}

#[test]
fn apply_replaces_the_general_choices() {
    let k = keys("epoch,time,train/box_loss,val/box_loss,lr/pg0,lr/pg1,lr/pg2");
    let t = recognise(
        LogFormat::Csv,
        &k,
        Some(1),
        &args("args.yaml", "epochs: 10\n"),
    )
    .unwrap();
    let mut m = MetricsConfig::default();
    let mut chosen = vec![
        ("lr", "\"lr/pg0\"".to_string()),
        ("time", "\"time\"".to_string()),
    ];
    let mut notes = vec!["lr <- [\"lr/pg0\"]".to_string()];
    t.apply(&mut m, &mut chosen, &mut notes);
    assert_eq!(
        (m.lr.first(), m.unit, m.planned_total, m.clock),
        ("lr/pg1", StepUnit::Epoch, Some(10), Clock::Elapsed)
    );
    assert!(
        chosen.contains(&("lr", "\"lr/pg1\"".into()))
            && chosen.contains(&("unit", "\"epoch\"".into()))
            && chosen.contains(&("planned_total", "10  # epochs: 10 in args.yaml".into()))
    );
    assert!(!notes.iter().any(|n| n.contains("lr/pg0\"]")), "{notes:?}");
}

#[test]
fn lightning_epochs_become_its_last_step_from_the_logs_epoch_column() {
    // Written by Lightning 2.0.9's CSVLogger (5 epochs of 37 steps, log_every_n_steps 10,
    // validation rows on each epoch's last step, lr rows without an epoch).
    let csv = "lr-SGD,step,train_loss,epoch,val_loss\n0.01,0,,,\n,9,4.23030424118042,0,\n,19,6.239514350891113,0,\n,29,1.8572473526000977,0,\n,36,,0,1.1449624300003052\n0.009045084971874737,37,,,\n,39,1.1483250856399536,1,\n,49,1.1377348899841309,1,\n,59,0.4510386884212494,1,\n,69,0.25582852959632874,1,\n,73,,1,0.29106712341308594\n0.0065450849718747366,74,,,\n,79,0.40362995862960815,2,\n,89,0.13171403110027313,2,\n,99,0.20382992923259735,2,\n,109,0.1213257908821106,2,\n,110,,2,0.10881807655096054\n0.0034549150281252628,111,,,\n,119,0.11375407129526138,3,\n,129,0.08695756644010544,3,\n,139,0.06830229610204697,3,\n,147,,3,0.0649615153670311\n0.0009549150281252632,148,,,\n,149,0.059833988547325134,4,\n,159,0.043734077364206314,4,\n,169,0.05892130360007286,4,\n,179,0.03606230020523071,4,\n,184,,4,0.0563654825091362\n";
    let rows = epoch_rows(csv);
    assert_eq!(rows.len(), 23, "{rows:?}");
    let hp = args("hparams.yaml", "lr: 0.01\nmax_epochs: 5\n");
    let (last, words) = planned_from_epochs(&rows, &hp, Counting::FromZero).unwrap();
    assert_eq!(last, 5 * 37 - 1, "{words}");
    assert!(words.contains("37 steps per epoch"), "{words}");
    // LightningCLI keeps it under `trainer:`; the module's own `epochs` is second to it.
    let cli = args(
        "config.yaml",
        "seed_everything: 0\ntrainer:\n  accelerator: cpu\n  max_epochs: 3\nmodel:\n  epochs: 9\n",
    );
    assert_eq!(
        planned_from_epochs(&rows, &cli, Counting::FromZero).map(|t| t.0),
        Some(3 * 37 - 1)
    );
    // Two epochs seen: 37 to 39 steps each, too open to say.
    assert_eq!(
        planned_from_epochs(&rows[..9], &hp, Counting::FromZero),
        None
    );
    // One epoch seen: nothing bounds it from above.
    assert_eq!(
        planned_from_epochs(&rows[..4], &hp, Counting::FromZero),
        None
    );
    // Steps that restart (a resumed launch logging from 0 again) contradict each other.
    let mut resumed = rows.clone();
    resumed.push((3, 9));
    assert_eq!(planned_from_epochs(&resumed, &hp, Counting::FromZero), None);
}

#[test]
fn mmengine_epochs_from_its_config_dump_and_one_based_rows() {
    let cfg = mmengine_train_cfg(
        "optim_wrapper = dict(optimizer=dict(lr=0.02))\ntrain_cfg = dict(by_epoch=True, max_epochs=100, val_interval=1)\nval_cfg = dict()\n",
    );
    assert_eq!(
        cfg.get("train_cfg.max_epochs").map(String::as_str),
        Some("100")
    );
    let args = vec![RunArgs {
        file: "vis_data/config.py".into(),
        values: cfg,
    }];
    // MMPretrain's scalars.json: one train record per epoch at its last iteration (69 each),
    // validation records without `iter`.
    let text = "{\"lr\": 0.02, \"epoch\": 1, \"iter\": 69, \"step\": 69}\n{\"accuracy/top1\": 43.1, \"step\": 1}\n{\"lr\": 0.02, \"epoch\": 2, \"iter\": 138, \"step\": 138}\n{\"lr\": 0.02, \"epoch\": 59, \"iter\": 4071, \"step\": 4071}\n";
    let rows = jsonl_epoch_rows(text);
    assert_eq!(rows, vec![(1, 69), (2, 138), (59, 4071)]);
    let (last, words) = planned_from_epochs(&rows, &args, Counting::FromOne).unwrap();
    assert_eq!(last, 6900, "{words}");
    // Wrapped over lines, by iterations: max_iters is the total itself.
    let cfg = mmengine_train_cfg("train_cfg = dict(\n    type='IterBasedTrainLoop', max_iters=20000,\n    val_interval=2000)\n");
    assert_eq!(
        cfg.get("train_cfg.max_iters").map(String::as_str),
        Some("20000")
    );
    assert_eq!(
        cfg.get("train_cfg.type").map(String::as_str),
        Some("IterBasedTrainLoop")
    );
}

#[test]
fn yolo_tensorboard_events_by_their_tags() {
    let v8 = keys("train/box_loss,train/cls_loss,train/dfl_loss,val/box_loss,metrics/mAP50(B)");
    let t = recognise(
        LogFormat::Tensorboard,
        &v8,
        None,
        &args("args.yaml", "epochs: 25\n"),
    )
    .unwrap();
    assert_eq!(
        (
            t.step.as_str(),
            t.unit,
            t.loss.as_deref(),
            t.lr,
            t.total.map(|t| t.0)
        ),
        (
            "step",
            StepUnit::Epoch,
            Some("train/box_loss"),
            None,
            Some(25)
        )
    );
    // YOLOv5 logs x/lr0..2 at the 0-based epoch: the last is epochs - 1, the lr pg1's.
    let v5 = keys("train/box_loss,train/obj_loss,x/lr0,x/lr1,x/lr2");
    let t = recognise(
        LogFormat::Tensorboard,
        &v5,
        None,
        &args("opt.yaml", "epochs: 300\n"),
    )
    .unwrap();
    assert_eq!(
        (t.lr.as_deref(), t.total.map(|t| t.0)),
        (Some("x/lr1"), Some(299))
    );
}
