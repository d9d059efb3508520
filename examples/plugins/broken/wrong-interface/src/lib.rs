//! Test fixture: a valid component that implements some other world, not `policy`.

wit_bindgen::generate!({
    inline: "
        package switchyard:not-a-policy@0.1.0;
        world other {
            export run: func(input: string) -> u32;
        }
    ",
    world: "other",
});

struct Other;

impl Guest for Other {
    fn run(input: String) -> u32 {
        input.len() as u32
    }
}

export!(Other);
