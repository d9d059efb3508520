use super::*;

/// The real npm servers' tools and the fixture tools (tests/search/tools.json), named as a
/// group shows them (`server__tool`): the first `n`.
fn corpus(n: usize) -> Vec<Value> {
    let file: Value =
        serde_json::from_str(include_str!("../../../../tests/search/tools.json")).expect("tests/search/tools.json");
    let tools = file["tools"].as_array().expect("tools");
    assert!(tools.len() >= n, "tests/search/tools.json has {} tools, fewer than {n}", tools.len());
    tools
        .iter()
        .take(n)
        .map(|t| {
            let mut tool = t["tool"].clone();
            let name = format!("{}__{}", t["server"].as_str().expect("server"), tool["name"].as_str().expect("name"));
            tool["name"] = name.into();
            tool
        })
        .collect()
}

/// Tasks as a user asks them, with the tool that does each (`|`: either does it).
fn tasks() -> Vec<(String, String)> {
    let file: Value =
        serde_json::from_str(include_str!("../../../../tests/search/tasks.json")).expect("tests/search/tasks.json");
    let tasks = file["tasks"].as_array().expect("tasks");
    tasks.iter().map(|t| (t["task"].as_str().expect("task").into(), t["tool"].as_str().expect("tool").into())).collect()
}

#[test]
fn the_right_tool_is_in_the_top_three_for_nine_tasks_in_ten() {
    for n in [50, 150] {
        let index = Index::new(corpus(n));
        let all = tasks();
        let tasks: Vec<_> = all.iter().filter(|(_, want)| want.split('|').any(|w| index.get(w).is_some())).collect();
        let mut missed = Vec::new();
        for (task, want) in &tasks {
            let top: Vec<&str> = index.search(task, 3).iter().map(|t| t["name"].as_str().unwrap_or_default()).collect();
            if !want.split('|').any(|w| top.contains(&w)) {
                missed.push(format!("{task:?}: wanted {want}, got {top:?}"));
            }
        }
        let hit = tasks.len() - missed.len();
        eprintln!("{n} tools: {hit} of {} tasks have their tool in the top 3", tasks.len());
        for m in &missed {
            eprintln!("  missed {m}");
        }
        assert!(tasks.len() >= 30 || n < 150, "at least 30 tasks over 150 tools");
        assert!(
            hit * 10 >= tasks.len() * 9,
            "{n} tools: only {hit} of {} in the top 3:\n{}",
            tasks.len(),
            missed.join("\n")
        );
    }
}

#[test]
fn every_task_names_a_tool_of_the_corpus() {
    let index = Index::new(corpus(150));
    let tasks = tasks();
    for (task, want) in &tasks {
        assert!(want.split('|').all(|w| index.get(w).is_some()), "{task:?}: no tool {want} in tests/search/tools.json");
    }
    assert!(tasks.len() >= 30);
}

#[test]
fn identifiers_split_into_words() {
    assert_eq!(words("read_text_file"), "read text file");
    assert_eq!(words("getTinyImage"), "get Tiny Image");
    assert_eq!(words("get-env"), "get env");
    assert_eq!(words("sequentialthinking"), "sequentialthinking");
}

#[test]
fn search_tools_answers_with_schemas_and_call_tool_checks_the_name() {
    let index = Index::new(corpus(50));
    let r = search_result(&index, &json!({"query": "write a file", "limit": 2}));
    let found = r["structuredContent"]["tools"].as_array().expect("tools");
    assert_eq!(found.len(), 2);
    assert_eq!(found[0]["name"], "filesystem__write_file");
    assert!(found[0]["inputSchema"]["properties"]["path"].is_object());
    let text = r["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("filesystem__write_file"), "{text}");
    let (name, args) = call_target(&index, &json!({"name": "memory__read_graph", "arguments": {"x": 1}}))
        .expect("a tool of the index");
    assert_eq!((name.as_str(), args), ("memory__read_graph", json!({"x": 1})));
    let err = call_target(&index, &json!({"name": "nope"})).expect_err("not a tool");
    assert!(err.contains("search_tools"), "{err}");
    assert!(call_target(&index, &json!({"name": "memory__read_graph", "arguments": [1]})).is_err());
}

#[test]
fn an_empty_query_lists_by_name_and_no_match_says_so() {
    let index = Index::new(vec![json!({"name": "b"}), json!({"name": "a"})]);
    let names: Vec<_> = index.search("", 5).iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, vec![json!("a"), json!("b")]);
    let r = search_result(&index, &json!({"query": "zebra"}));
    assert!(r["content"][0]["text"].as_str().expect("text").starts_with("No tool matches"));
}

/// Found from outside: `limit: 0` gave one tool, `-3`, `"7"` and `2.5` the default, and a
/// query that is no string (or none) listed the first tools. Each is a tool error now that
/// says what is taken, and a good limit is kept.
#[test]
fn search_tools_refuses_arguments_it_cannot_take_and_says_what_it_takes() {
    let index = Index::new(corpus(50));
    for bad in [json!(0), json!(-3), json!("7"), json!(2.5), json!(26)] {
        let r = search_result(&index, &json!({"query": "write a file", "limit": bad}));
        let text = r["content"][0]["text"].as_str().expect("text");
        assert_eq!(r["isError"], true, "limit {bad}: {r}");
        assert!(text.contains("`limit` must be a whole number from 1 to 25"), "{text}");
    }
    for bad in [json!({}), json!({"query": 5}), json!({"query": ""}), json!({"query": "  "})] {
        let r = search_result(&index, &bad);
        assert_eq!(r["isError"], true, "{bad}: {r}");
        assert!(r["content"][0]["text"].as_str().expect("text").contains("`query`"), "{r}");
    }
    let r = search_result(&index, &json!({"query": "write a file", "limit": 7}));
    assert_eq!(r["structuredContent"]["tools"].as_array().expect("tools").len(), 7);
    let r = search_result(&index, &json!({"query": "write a file", "limit": null}));
    assert_eq!(r["structuredContent"]["tools"].as_array().expect("tools").len(), 5);
}
