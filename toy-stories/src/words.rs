//! The words the story generator picks from.

/// A person or an animal in a story.
#[derive(Clone, Copy, Debug)]
pub struct Character {
    pub name: &'static str,
    /// `girl`, `boy`, `dog`, ...
    pub kind: &'static str,
    /// Pronouns she/her (else he/him).
    pub girl: bool,
}

const fn c(name: &'static str, kind: &'static str, girl: bool) -> Character {
    Character { name, kind, girl }
}

pub const CHARACTERS: &[Character] = &[
    c("Lily", "girl", true),
    c("Tom", "boy", false),
    c("Mia", "girl", true),
    c("Ben", "boy", false),
    c("Sara", "girl", true),
    c("Jack", "boy", false),
    c("Emma", "girl", true),
    c("Leo", "boy", false),
    c("Anna", "girl", true),
    c("Sam", "boy", false),
    c("Zoe", "girl", true),
    c("Tim", "boy", false),
    c("Ella", "girl", true),
    c("Max", "dog", false),
    c("Bella", "cat", true),
    c("Pip", "bird", false),
    c("Rosie", "rabbit", true),
    c("Finn", "fox", false),
    c("Daisy", "duck", true),
    c("Ollie", "pig", false),
    c("Molly", "mouse", true),
    c("Toby", "turtle", false),
    c("Lucy", "lamb", true),
    c("Buzz", "bee", false),
    c("Coco", "monkey", true),
    c("Bruno", "bear", false),
    c("Fluffy", "kitten", true),
    c("Sunny", "frog", false),
    c("Nina", "squirrel", true),
    c("Rex", "puppy", false),
];

/// A place: its name, how to say "in it", and three things found there.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub name: &'static str,
    pub at: &'static str,
    pub things: (&'static str, &'static str, &'static str),
}

const fn p(name: &'static str, at: &'static str, things: (&'static str, &'static str, &'static str)) -> Place {
    Place { name, at, things }
}

pub const PLACES: &[Place] = &[
    p("park", "in the park", ("the swings", "the big slide", "the sandbox")),
    p("forest", "in the forest", ("a tall tree", "a little path", "a ring of mushrooms")),
    p("garden", "in the garden", ("the flowers", "the small pond", "the tomato plants")),
    p("beach", "at the beach", ("the sand", "the waves", "a pile of shells")),
    p("farm", "on the farm", ("the barn", "the hay", "the big red tractor")),
    p("meadow", "in the meadow", ("the tall grass", "the daisies", "a little stream")),
    p("town", "in the town", ("the bakery", "the toy shop", "the fountain")),
    p("pond", "by the pond", ("the lily pads", "the reeds", "a flat rock")),
    p("hill", "on the hill", ("the very top", "a big stone", "the old fence")),
    p("backyard", "in the backyard", ("the fence", "the apple tree", "the wooden shed")),
    p("school", "at school", ("the playground", "the classroom", "the reading corner")),
    p("lake", "by the lake", ("the dock", "the little boats", "the cool water")),
    p("woods", "in the woods", ("a hollow log", "a mossy rock", "a berry bush")),
    p("village", "in the village", ("the market", "the old well", "the bridge")),
];

pub const OBJECTS: &[&str] = &[
    "ball",
    "kite",
    "teddy bear",
    "toy car",
    "hat",
    "book",
    "blanket",
    "drum",
    "boat",
    "shell",
    "doll",
    "robot",
    "scarf",
    "bucket",
    "wagon",
    "balloon",
    "whistle",
    "marble",
    "cup",
    "crayon",
    "train",
    "umbrella",
    "bell",
    "box",
    "sock",
    "ribbon",
];

pub const COLORS: &[&str] =
    &["red", "blue", "green", "yellow", "pink", "purple", "orange", "shiny", "little", "big", "soft", "old", "new", "striped"];

/// A food with its article, and its noun alone.
pub const FOODS: &[(&str, &str)] = &[
    ("an apple", "apple"),
    ("a cake", "cake"),
    ("a cookie", "cookie"),
    ("a pie", "pie"),
    ("a sandwich", "sandwich"),
    ("a banana", "banana"),
    ("a carrot", "carrot"),
    ("a muffin", "muffin"),
    ("a pear", "pear"),
    ("a slice of bread", "bread"),
    ("a bowl of soup", "soup"),
    ("a peach", "peach"),
    ("a cupcake", "cupcake"),
    ("a plum", "plum"),
];

pub const TRAITS: &[&str] =
    &["kind", "brave", "curious", "shy", "happy", "silly", "clever", "gentle", "busy", "sleepy", "friendly", "little", "playful", "quiet"];

pub const PARENTS: &[&str] = &["mom", "dad", "grandma", "grandpa"];

pub const TIMES: &[&str] = &[
    "One day",
    "One sunny morning",
    "One rainy afternoon",
    "One windy day",
    "One cold winter day",
    "One warm summer day",
    "One bright spring morning",
    "One evening",
    "On a cloudy day",
    "One Saturday",
    "Early one morning",
];

pub const SIZES: &[&str] = &["big", "small", "quiet", "sunny", "green", "busy", "pretty", "little"];

pub const LIKES: &[&str] = &[
    "to run and jump",
    "to sing songs",
    "to draw pictures",
    "to look at the stars",
    "to splash in puddles",
    "to read books",
    "to dig in the dirt",
    "to climb trees",
    "to dance",
    "to build towers",
    "to play hide and seek",
    "to help others",
    "to count the clouds",
    "to make funny faces",
];
